// A Curator client driven line by line over stdin/stdout by the Rust tests
// (tests/src/zookeeper.rs, `Curator`): the Java side of the ZooKeeper
// interop tests. Written for this project.
//
//   java -cp <curator + zookeeper jars>:<dir of this class> CuratorLock <connect string> [session ms]
//
// It connects, prints `ready`, then answers each command line with one line:
//
//   acquire <path> <ms>         InterProcessMutex(path).acquire(ms)     -> acquired | timeout
//   release <path>              InterProcessMutex(path).release()       -> ok
//   read_acquire <path> <ms>    InterProcessReadWriteLock(path).readLock()  -> acquired | timeout
//   write_acquire <path> <ms>   InterProcessReadWriteLock(path).writeLock() -> acquired | timeout
//   read_release <path>         ... readLock().release()                -> ok
//   write_release <path>        ... writeLock().release()               -> ok
//   sem_acquire <path> <n> <ms> InterProcessSemaphoreV2(path, n).acquire(ms) -> acquired | timeout
//   sem_release <path>          closes the oldest lease it holds on path -> ok
//
// Any failure is `error <one line>`. One lock object per path and kind is kept
// for the whole run, so a second acquire re-enters (Curator's locks are
// re-entrant per thread; every command runs on one worker thread). When stdin
// closes it closes its session, which deletes its lock nodes, and exits at
// once, even in the middle of a command (within 5 s when no server answers
// the close): a test process that dies never leaves it behind.

import java.io.BufferedReader;
import java.util.ArrayDeque;
import java.util.Deque;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorLock {
    private final CuratorFramework client;
    private final Map<String, InterProcessMutex> mutexes = new HashMap<>();
    private final Map<String, InterProcessReadWriteLock> readWrite = new HashMap<>();
    private final Map<String, InterProcessSemaphoreV2> semaphores = new HashMap<>();
    private final Map<String, Deque<Lease>> leases = new HashMap<>();

    private CuratorLock(CuratorFramework client) {
        this.client = client;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: CuratorLock <connect string> [session timeout ms]");
            System.exit(2);
        }
        int sessionMs = args.length > 1 ? Integer.parseInt(args[1]) : 5000;
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(args[0])
                .sessionTimeoutMs(sessionMs)
                .connectionTimeoutMs(Math.min(sessionMs, 3000))
                .retryPolicy(new ExponentialBackoffRetry(100, 10, 1000))
                .build();
        client.start();

        // This thread runs the commands one after another (Curator's locks
        // belong to the thread that acquired them); another reads stdin, so
        // that its end is noticed at once, while connecting or while a
        // command waits.
        BlockingQueue<String> commands = new LinkedBlockingQueue<>();
        Thread reader = new Thread(() -> readCommands(commands, client), "stdin");
        reader.setDaemon(true);
        reader.start();

        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            answer("error not connected within 30 s");
            client.close();
            System.exit(1);
        }
        answer("ready");
        new CuratorLock(client).serve(commands);
    }

    private static void readCommands(BlockingQueue<String> commands, CuratorFramework client) {
        try {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((line = in.readLine()) != null) {
                line = line.trim();
                if (!line.isEmpty()) {
                    commands.put(line);
                }
            }
        } catch (Exception e) {
            // Stdin is gone either way.
        }
        // Stdin closed: the test is done with us, or gone. Close the session
        // (its lock nodes go with it), but never linger long: there may be
        // no server left to answer the close. 15 s: a close on a machine
        // whose cores are busy can take seconds.
        Thread halt = new Thread(() -> {
            try {
                Thread.sleep(15000);
            } catch (InterruptedException e) {
                // halting anyway
            }
            Runtime.getRuntime().halt(0);
        }, "halt");
        halt.setDaemon(true);
        halt.start();
        client.close();
        System.exit(0);
    }

    private void serve(BlockingQueue<String> commands) {
        while (true) {
            String line;
            try {
                line = commands.take();
            } catch (InterruptedException e) {
                return;
            }
            String answer;
            try {
                answer = run(line.split("\\s+"));
            } catch (Exception e) {
                answer = "error " + oneLine(e);
            }
            answer(answer);
        }
    }

    private static void answer(String line) {
        System.out.println(line);
        System.out.flush();
    }

    private String run(String[] words) throws Exception {
        String command = words[0];
        switch (command) {
            case "acquire":
                need(words, 3);
                return acquired(mutex(words[1]).acquire(Long.parseLong(words[2]), TimeUnit.MILLISECONDS));
            case "release":
                need(words, 2);
                mutex(words[1]).release();
                return "ok";
            case "read_acquire":
                need(words, 3);
                return acquired(readWrite(words[1]).readLock()
                        .acquire(Long.parseLong(words[2]), TimeUnit.MILLISECONDS));
            case "write_acquire":
                need(words, 3);
                return acquired(readWrite(words[1]).writeLock()
                        .acquire(Long.parseLong(words[2]), TimeUnit.MILLISECONDS));
            case "read_release":
                need(words, 2);
                readWrite(words[1]).readLock().release();
                return "ok";
            case "write_release":
                need(words, 2);
                readWrite(words[1]).writeLock().release();
                return "ok";
            case "sem_acquire":
                need(words, 4);
                Lease lease = semaphore(words[1], Integer.parseInt(words[2]))
                        .acquire(Long.parseLong(words[3]), TimeUnit.MILLISECONDS);
                if (lease == null) {
                    return "timeout";
                }
                leases.computeIfAbsent(words[1], p -> new ArrayDeque<>()).addLast(lease);
                return "acquired";
            case "sem_release":
                need(words, 2);
                Deque<Lease> held = leases.get(words[1]);
                if (held == null || held.isEmpty()) {
                    return "error no lease held on " + words[1];
                }
                held.removeFirst().close();
                return "ok";
            default:
                return "error unknown command " + command;
        }
    }

    private InterProcessMutex mutex(String path) {
        return mutexes.computeIfAbsent(path, p -> new InterProcessMutex(client, p));
    }

    private InterProcessReadWriteLock readWrite(String path) {
        return readWrite.computeIfAbsent(path, p -> new InterProcessReadWriteLock(client, p));
    }

    private InterProcessSemaphoreV2 semaphore(String path, int permits) {
        return semaphores.computeIfAbsent(path + " " + permits,
                k -> new InterProcessSemaphoreV2(client, path, permits));
    }

    private static String acquired(boolean acquired) {
        return acquired ? "acquired" : "timeout";
    }

    private static void need(String[] words, int count) {
        if (words.length != count) {
            throw new IllegalArgumentException(
                    words[0] + " takes " + (count - 1) + " argument(s), got " + (words.length - 1));
        }
    }

    private static String oneLine(Throwable e) {
        String text = e.getClass().getSimpleName() + ": " + e.getMessage();
        return text.replace('\n', ' ').replace('\r', ' ');
    }
}
