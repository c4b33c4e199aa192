# Runs Debian's Patroni (3.0.2) with ZooKeeper digest authentication. Started by deploy/local/pg-ha,
# not by hand: /usr/bin/python3 pg-ha-patroni.py patroni.yml, with TXKIT_ZK_AUTH ("user:password",
# deploy/local/zk auth) in its environment. `--forget HOSTS PATH` deletes a cluster's nodes instead.
#
# Patroni 3.0.2's ZooKeeper store passes no auth_data to kazoo and builds its ACLs (set_acls) for the
# x509 scheme only, while the project's ensemble wants every client to authenticate with the digest
# user and txkit's nodes readable and writable by that user alone. kazoo itself takes both
# (KazooClient(auth_data=..., default_acl=...)), so this launcher gives them to Patroni's client
# and then runs Patroni unchanged: its nodes (/txkit-pg-ha/...) carry the digest user's ACL, and a
# client without the credentials can neither read nor take the leader key.
import os
import sys

from kazoo.security import make_digest_acl

import patroni.dcs.zookeeper as zookeeper


def _patch(cred):
    user, _, password = cred.partition(":")
    init = zookeeper.PatroniKazooClient.__init__

    def init_with_digest(self, *args, **kwargs):
        kwargs["auth_data"] = [("digest", cred)]
        kwargs["default_acl"] = [make_digest_acl(user, password, all=True)]
        init(self, *args, **kwargs)

    zookeeper.PatroniKazooClient.__init__ = init_with_digest


def _forget(hosts, cred, path):
    """Delete path (a cluster's nodes in the store) as the digest user: a fresh start of a cluster
    whose data directories were removed must not find the old cluster's initialize key."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=hosts, auth_data=[("digest", cred)])
    zk.start(timeout=10)
    try:
        zk.delete(path, recursive=True)
    except Exception as e:  # NoNodeError: nothing to forget
        if type(e).__name__ != "NoNodeError":
            raise
    finally:
        zk.stop()


# Patroni starts PostgreSQL through multiprocessing, whose children import this file again (not as
# __main__): they need neither the credentials nor the patch.
if __name__ == "__main__":
    cred = os.environ.pop("TXKIT_ZK_AUTH", "")  # not passed on to PostgreSQL
    if ":" not in cred:
        sys.exit("pg-ha-patroni: TXKIT_ZK_AUTH (user:password of the ZooKeeper digest user) is not set")
    if len(sys.argv) == 4 and sys.argv[1] == "--forget":  # --forget HOSTS PATH
        _forget(sys.argv[2], cred, sys.argv[3])
        sys.exit(0)
    _patch(cred)
    from patroni.__main__ import main

    sys.exit(main())
