// CuratorContender takes an Apache Curator InterProcessMutex over and over, so that lock's tests can
// check that txkit's Mutex and Curator's exclude each other on the same ZooKeeper path.
//
// Usage: java -cp <classes>:<lib>/* CuratorContender CONNECT LOCK_PATH ITERATIONS MARKER HOLD_MILLIS
//
// It prints, one line each, flushed at once:
//   READY                        connected to the ensemble, about to contend
//   ACQUIRED <i> <node name>     holds the lock for the i-th time (0-based) through that node
//   VIOLATION <why>              mutual exclusion is broken; the program exits 2 right after
//   DONE <iterations>            every iteration done; the program exits 0 right after
//   STATE <connection state>     the Curator connection changed state (informational)
// While it holds the lock it owns the marker file: it creates it with Files.createFile, which fails
// when the file exists (someone else believes they hold the lock too), and deletes it before the
// release. Any other failure exits 1 with a stack trace on stderr.

import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Collection;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.curator.utils.ZKPaths;

public final class CuratorContender {
    /** Exposes the node the current thread holds the lock through. */
    static final class Mutex extends InterProcessMutex {
        Mutex(CuratorFramework client, String path) {
            super(client, path);
        }

        String ownNode() {
            return getLockPath();
        }
    }

    static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static void violation(String why) {
        say("VIOLATION " + why);
        System.exit(2);
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: CuratorContender CONNECT LOCK_PATH ITERATIONS MARKER HOLD_MILLIS");
            System.exit(1);
        }
        String connect = args[0];
        String lockPath = args[1];
        int iterations = Integer.parseInt(args[2]);
        Path marker = Paths.get(args[3]);
        long holdMillis = Long.parseLong(args[4]);

        // slf4j-simple: warnings and errors only, to stderr (the default target).
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        }

        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(4000)
                .connectionTimeoutMs(4000)
                .retryPolicy(new ExponentialBackoffRetry(100, 5))
                .build();
        client.getConnectionStateListenable().addListener((c, state) -> say("STATE " + state));
        client.start();
        try {
            if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
                System.err.println("no connection to " + connect + " within 30s");
                System.exit(1);
            }
            say("READY");

            Mutex mutex = new Mutex(client, lockPath);
            for (int i = 0; i < iterations; i++) {
                mutex.acquire();
                try {
                    Files.createFile(marker);
                } catch (FileAlreadyExistsException e) {
                    violation("marker " + marker + " exists at acquisition " + i);
                }
                String own = mutex.ownNode();
                if (own == null) {
                    violation("acquired without a lock node at acquisition " + i);
                }
                // Everyone in the queue, Go contenders included, sorted by Curator: ours must be first.
                Collection<String> participants = mutex.getParticipantNodes();
                String lowest = participants.isEmpty() ? "" : participants.iterator().next();
                if (!own.equals(lowest)) {
                    violation("holding " + own + " but the lowest participant is " + lowest + " of " + participants);
                }
                say("ACQUIRED " + i + " " + ZKPaths.getNodeFromPath(own));
                Thread.sleep(holdMillis);
                try {
                    Files.delete(marker);
                } catch (NoSuchFileException e) {
                    violation("marker " + marker + " vanished while held at acquisition " + i);
                }
                mutex.release();
            }
            say("DONE " + iterations);
        } finally {
            client.close();
        }
        System.exit(0);
    }
}
