// Package deploytest holds the tests of the deploy/local scripts, which run the real scripts
// against the servers `make up` started. It has no code of its own; its tests show that:
//
//   - a server start fails at once, naming the port and the process that holds it, when a port is
//     held by a process this checkout (TXKIT_HOME) did not start;
//   - deploy/local/status probes every server, says whether the process that answers is this
//     checkout's, and creates nothing;
//   - a daemon started by the scripts (start_daemon, without_fds in deploy/local/lib.sh) holds no
//     file descriptor of its caller beyond stdin, stdout and stderr;
//   - deploy/local/rocketmq topic -g GROUP also creates the consumer group's retry topic.
//
// Run them with
//
//	set -a; eval "$(deploy/local/env)"; set +a
//	go test -count=1 ./internal/deploytest/
package deploytest
