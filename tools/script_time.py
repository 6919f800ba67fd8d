#!/usr/bin/env python3
"""Redis time per acquire + release of a free reentrant lock (issue 26).

Runs the scripts the client runs (composed from their .lua files as
lock-runtime/src/engine/redis/scripts/mod.rs composes them), with the keys
and arguments the client sends, against a throwaway redis-server on a free
loopback port. Calls are pipelined 64 deep, the way 64 tasks on one client
send them. Reads `INFO commandstats` (EVALSHA's time, which includes the
commands a script calls) and `INFO cpu` (all of Redis's time: reading,
parsing, answering, expiring latches) around each window, and prints the
medians per acquire + release pair. The floor (`SET NX PX` and a
compare-and-delete script) runs in the same rounds, interleaved.

    python3 tools/script_time.py                       # this checkout's scripts
    python3 tools/script_time.py --base DIR            # and DIR's, side by side
    git archive REV lock-runtime/src/engine/redis/scripts | tar -x -C /tmp/rev
    python3 tools/script_time.py --base /tmp/rev/lock-runtime/src/engine/redis/scripts

With --bounds, two lower bounds run beside them, with the same keys and
arguments: "writes" makes only the calls every guarantee needs (EXISTS,
INCR of the token, HSET, PEXPIRE; HGET, DEL, PUBLISH, SET of the latch)
and checks nothing else; "bare" is a lock without fencing or latch
(EXISTS, HSET, PEXPIRE; HGET, DEL, PUBLISH), the shape of Redisson's own.

With --instructions, each variant runs alone in a redis-server under
valgrind's callgrind instead, twice (1,000 and 3,000 pairs), and the
difference gives Redis's instructions per pair: repeatable whatever else
the machine does, where the times above move by a tenth between runs.

    python3 tools/script_time.py --instructions --base DIR
    python3 tools/script_time.py --bounds [--instructions]

Only the standard library; redis-server (and valgrind for --instructions)
must be on PATH.
"""
import argparse
import os
import re
import tempfile
import socket
import subprocess
import time
import uuid

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                    '..', 'lock-runtime', 'src', 'engine', 'redis', 'scripts')


def scripts(folder):
    """The acquire and unlock scripts of `folder`, composed as mod.rs does
    (the fast files only when the folder has them)."""
    def text(name):
        path = os.path.join(folder, name)
        return open(path).read() if os.path.exists(path) else ''
    acquire = (text('fast_token.lua') + text('reentrant_fast.lua')
               + 'local function acquire()\n' + text('counter.lua') + text('holds_of.lua')
               + text('reentered.lua') + text('reentrant_acquire.lua') + '\nend\n'
               + text('acquire_latch.lua'))
    unlock = (text('fast_release.lua') + text('unlock_fast.lua') + text('holds_of.lua')
              + text('holds.lua') + text('keep_taken.lua') + text('unlock.lua'))
    # Before unlock_fast.lua, ARGV[6] and [7] were hold_at_least's; since,
    # ARGV[6] is the first-send flag and the minimum's come only when set.
    first = ('1',) if text('unlock_fast.lua') else ('0', '0')
    return acquire, unlock, first


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(('127.0.0.1', port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b''

    def send(self, commands):
        out = []
        for command in commands:
            out.append(b'*%d\r\n' % len(command))
            for arg in command:
                arg = arg if isinstance(arg, bytes) else str(arg).encode()
                out.append(b'$%d\r\n%s\r\n' % (len(arg), arg))
        self.sock.sendall(b''.join(out))

    def _more(self):
        data = self.sock.recv(1 << 20)
        if not data:
            raise OSError('the server closed the connection')
        self.buf += data

    def _line(self):
        while b'\r\n' not in self.buf:
            self._more()
        line, self.buf = self.buf.split(b'\r\n', 1)
        return line

    def read(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b'-':
            raise RuntimeError(rest.decode())
        if kind in (b'+', b':'):
            return rest
        if kind == b'$':
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self._more()
            value, self.buf = self.buf[:n], self.buf[n + 2:]
            return value
        if kind == b'*':
            return [self.read() for _ in range(max(int(rest), 0))]
        raise RuntimeError(f'unexpected reply {line!r}')

    def call(self, *command):
        self.send([command])
        return self.read()


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def info(conn):
    fields = {}
    for line in conn.call('INFO', 'all').decode().split('\r\n'):
        if ':' in line:
            key, value = line.split(':', 1)
            fields[key] = value
    evalsha = dict(kv.split('=') for kv in fields.get('cmdstat_evalsha', 'usec=0').split(','))
    return float(evalsha['usec']), float(fields['used_cpu_user']) + float(fields['used_cpu_sys'])


def start_server(port, prefix=()):
    server = subprocess.Popen(list(prefix) + ['redis-server', '--port', str(port), '--bind',
                              '127.0.0.1', '--save', '', '--appendonly', 'no'],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            return server, Conn(port)
        except OSError:
            time.sleep(0.05)
    server.kill()
    raise RuntimeError('redis-server did not start')


FLOOR_UNLOCK = ("if redis.call('get', KEYS[1]) == ARGV[1] then "
                "return redis.call('del', KEYS[1]) end return 0")


# Lower bounds (--bounds), called as the client calls the real scripts: what
# an acquire + release cannot do without ("writes"), and a lock with neither
# fencing nor latch ("bare"). Not the library's scripts: they skip checks
# the library must make (a counter's life, re-entries, latches of resends).
BOUNDS = {
    'writes': (
        "if redis.call('exists', KEYS[1]) == 0 then\n"
        "  local token = redis.call('incr', KEYS[2])\n"
        "  redis.call('hset', KEYS[1], ARGV[2], 1)\n"
        "  redis.call('pexpire', KEYS[1], ARGV[1])\n"
        "  return {1, token}\n"
        "end\n"
        "return {0, redis.call('pttl', KEYS[1])}\n",
        "if redis.call('hget', KEYS[1], ARGV[1]) == '1' then\n"
        "  redis.call('del', KEYS[1])\n"
        "  redis.call(ARGV[3], KEYS[2], ARGV[5])\n"
        "  redis.call('set', KEYS[3], 1, 'px', ARGV[2])\n"
        "  return 1\n"
        "end\n"
        "return 0\n",
        ('1',)),
    'bare': (
        "if redis.call('exists', KEYS[1]) == 0 then\n"
        "  redis.call('hset', KEYS[1], ARGV[2], 1)\n"
        "  redis.call('pexpire', KEYS[1], ARGV[1])\n"
        "  return {1, 0}\n"
        "end\n"
        "return {0, redis.call('pttl', KEYS[1])}\n",
        "if redis.call('hget', KEYS[1], ARGV[1]) == '1' then\n"
        "  redis.call('del', KEYS[1])\n"
        "  redis.call(ARGV[3], KEYS[2], ARGV[5])\n"
        "  return 1\n"
        "end\n"
        "return 0\n",
        ('1',)),
}


class Bench:
    """The variants' scripts loaded on `conn`, and their acquire + release pairs."""

    def __init__(self, conn, variants, depth):
        self.conn, self.depth, self.counter = conn, depth, 0
        self.client = str(uuid.uuid4())
        self.shas = {}
        for name, texts in variants.items():
            if texts is None:
                # The floor.
                self.shas[name] = (None, conn.call('SCRIPT', 'LOAD', FLOOR_UNLOCK).decode(), None)
            else:
                acquire, unlock, first = texts
                self.shas[name] = (conn.call('SCRIPT', 'LOAD', acquire).decode(),
                                   conn.call('SCRIPT', 'LOAD', unlock).decode(), first)

    def pair(self, variant, task):
        self.counter += 1
        n = self.counter
        name = f'bench:{variant}:{task}'
        acquire, unlock, first = self.shas[variant]
        if variant == 'floor':
            return (('SET', name, n, 'NX', 'PX', 30000),
                    ('EVALSHA', unlock, 1, name, n))
        holder, request = f'{self.client}:{n}', f'{self.client}:r{n}'
        tag = '{' + name + '}'
        return (('EVALSHA', acquire, 4, name, 'redisson_lock_token:' + tag,
                 'redisson_lock_holds:' + tag,
                 f'redisson_lock_acquire_latch:{tag}:{request}', 30000, holder, '0', 0),
                ('EVALSHA', unlock, 4, name, 'redisson_lock__channel:' + tag,
                 f'redisson_unlock_latch:{tag}:{request}', 'redisson_lock_holds:' + tag,
                 holder, 16000, 'publish', '0', '0') + first)

    def run(self, variant, pairs):
        for _ in range(pairs // self.depth):
            batch = [self.pair(variant, task) for task in range(self.depth)]
            for side in (0, 1):
                self.conn.send([p[side] for p in batch])
                for _ in batch:
                    self.conn.read()


def instructions(variant, scripts, pairs, depth):
    """Redis's instructions (callgrind) over a run of `pairs` pairs of `variant`."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, 'callgrind.out')
        server, conn = start_server(free_port(), ('valgrind', '--tool=callgrind',
                                                  f'--callgrind-out-file={out}'))
        try:
            bench = Bench(conn, {variant: scripts}, depth)
            bench.run(variant, pairs)
            try:
                conn.call('SHUTDOWN', 'NOSAVE')
            except (RuntimeError, OSError):
                pass
            server.wait(timeout=120)
        finally:
            server.kill()
        text = open(out).read()
        return int(re.search(r'^(?:summary|totals): (\d+)', text, re.M).group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--base', help='another revision\'s scripts folder, run side by side')
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--pairs', type=int, default=12800)
    parser.add_argument('--depth', type=int, default=64)
    parser.add_argument('--bounds', action='store_true',
                        help='also run the lower bounds "writes" and "bare"')
    parser.add_argument('--instructions', action='store_true',
                        help='count Redis\'s instructions per pair under callgrind instead')
    args = parser.parse_args()

    variants = {'head': scripts(HERE)}
    if args.base:
        variants = {'base': scripts(args.base), **variants}
    if args.bounds:
        variants.update(BOUNDS)
    variants['floor'] = None

    if args.instructions:
        print(f'Redis instructions per acquire + release pair (callgrind, 3,000 pairs less '
              f'1,000, {args.depth} deep)')
        for variant, texts in variants.items():
            few = instructions(variant, texts, 1024, args.depth)
            many = instructions(variant, texts, 3072, args.depth)
            print(f'{variant:8} {(many - few) / 2048:10.0f}')
        return

    server, conn = start_server(free_port())
    try:
        bench = Bench(conn, variants, args.depth)
        results = {name: [] for name in bench.shas}
        for _ in range(args.rounds):
            for variant in bench.shas:
                before = info(conn)
                bench.run(variant, args.pairs)
                after = info(conn)
                results[variant].append(((after[0] - before[0]) / args.pairs,
                                         (after[1] - before[1]) * 1e6 / args.pairs))
        print(f'per acquire + release pair, medians of {args.rounds} windows of {args.pairs} pairs, '
              f'{args.depth} deep')
        print(f'{"":8} {"EVALSHA µs":>11} {"Redis CPU µs":>13}')
        for variant, samples in results.items():
            evalsha = sorted(s[0] for s in samples)[len(samples) // 2]
            cpu = sorted(s[1] for s in samples)[len(samples) // 2]
            print(f'{variant:8} {evalsha:11.1f} {cpu:13.1f}')
        print('(the floor\'s EVALSHA is its compare-and-delete alone; its SET is in the CPU column)')
    finally:
        server.kill()
        server.wait()


if __name__ == '__main__':
    main()
