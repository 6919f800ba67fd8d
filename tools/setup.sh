#!/usr/bin/env bash
# Installs what the demo and the tests need on a fresh Debian/Ubuntu machine
# (a Rust toolchain is assumed: rustup), from the system's packages, each only
# when it is missing:
#   redis-server (with redis-cli)   the Redis engine's servers
#   etcd-server, etcd-client        the etcd engine's servers, and etcdctl for
#                                   the interop tests
#   protobuf-compiler               protoc, which the etcd client needs to build
#   openssl                         the TLS tests' throwaway certificates
#   zookeeper                       the ZooKeeper engine's servers: the tests
#                                   run its jars (/usr/share/java) with java,
#                                   not the system service
#   libcurator-recipes-java         Apache Curator 5.4's jars, for the Java
#                                   client the ZooKeeper interop tests drive
#   default-jdk-headless            javac (and java), which compiles and runs
#                                   that client; only when javac is missing
#   postgresql                      the PostgreSQL engine's servers: the tests
#                                   run initdb and postgres from
#                                   /usr/lib/postgresql/<version>/bin (and
#                                   psql), not the package's cluster
#   mariadb-server                  the MariaDB engine's servers: the tests
#                                   run mariadb-install-db and mariadbd (and
#                                   the mariadb client), not the system service
#   stress-ng                       loads every core, to run the tests as on
#                                   a busy machine (README)
# The tests start their own servers on free loopback ports; a system service
# (6379, 2379, 2181, 5432, 3306) is never used, and may run or not.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-server)
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# ZooKeeper and Curator are jars, not commands: look for the jars.
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
[ -f /usr/share/java/curator-recipes.jar ] || missing+=(libcurator-recipes-java)
command -v javac >/dev/null 2>&1 || missing+=(default-jdk-headless)
# PostgreSQL's server programs live in a versioned directory, off the PATH.
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || missing+=(postgresql)
# mariadbd is in /usr/sbin, which not every user's PATH holds.
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || missing+=(mariadb-server)
command -v mariadb-install-db >/dev/null 2>&1 || missing+=(mariadb-server)
command -v stress-ng >/dev/null 2>&1 || missing+=(stress-ng)

if [ "${#missing[@]}" -gt 0 ]; then
    # One name each.
    mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
    echo "setup: installing ${missing[*]} from the system's packages" >&2
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
    if command -v apt-get >/dev/null 2>&1; then
        # A mirror that fails once (a lock held by another apt, a list
        # fetched mid-update) is tried again, three times at most.
        for try in 1 2 3; do
            if $SUDO apt-get update -qq &&
                DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null; then
                break
            fi
            if [ "$try" = 3 ]; then
                echo "setup: could not install ${missing[*]}" >&2
                exit 1
            fi
            echo "setup: apt-get failed; trying again" >&2
            sleep 5
        done
    else
        echo "setup: please install ${missing[*]} (Redis 6 or newer, etcd 3.4 or newer, protoc, ZooKeeper 3.8 and Curator 5 jars, a JDK, PostgreSQL 13 or newer, MariaDB 10.11 or newer) and re-run" >&2
        exit 1
    fi
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo not found; install Rust from https://rustup.rs and re-run" >&2
    exit 1
fi
# The versions, for the log. Read whole, not through `head`: a tool
# whose reader closed early dies of SIGPIPE, which pipefail would make
# this script's failure.
redis-server --version >&2 || true
etcd_version=$(etcd --version 2>&1) || true
echo "${etcd_version%%$'\n'*}" >&2
for postgres in /usr/lib/postgresql/*/bin/postgres; do
    "$postgres" --version >&2 || true
done
"$(command -v mariadbd || echo /usr/sbin/mariadbd)" --version >&2 || true
