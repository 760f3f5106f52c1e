#!/usr/bin/env bash
# A real S3 server (s3s-fs, a Rust S3 implementation over a folder) for the scale benchmarks
# and benches/scale/ci.sh: buckets are the folder's subfolders, objects its files.
#
#   benches/scale/s3_server.sh binary DIR       # prints the path of s3s-fs $VERSION
#   benches/scale/s3_server.sh start DIR        # prints "export ..." lines: eval them
#   benches/scale/s3_server.sh put SRC s3://BUCKET/PREFIX   # (after eval) upload SRC's files
#   benches/scale/s3_server.sh stop DIR
#
# `binary` finds s3s-fs $VERSION: $S3S_FS, else `s3s-fs` on PATH if it is that version, else
# it builds it from crates.io into DIR (`cargo install --locked`, a throwaway target folder
# under DIR, removed after the build) and prints DIR/bin/s3s-fs; a later call finds it there.
# The build is `S3S_PROFILE=ci` (the default: a debug build without debug info, the cheapest:
# 90 CPU-seconds here against 203 at opt-level 1 (release: more still); it serves
# the CI preset in seconds) or `S3S_PROFILE=release` (for the benchmarks, which measure the
# server's speed too).
#
# `start` picks a free loopback port, starts the server over DIR/root with fixed keys, waits
# until it answers, and leaves its pid in DIR/s3s.pid and its log in DIR/s3s.log.
#
# `put` creates the bucket and uploads every file of SRC through the S3 API (one PUT each,
# 4 at a time, curl's SigV4). Objects must come in through the API, not be laid into the
# folder: s3s-fs keeps no ETag for a file it did not write, and then hashes the whole object
# (MD5) on every HEAD and every GET with If-Match.
set -euo pipefail
VERSION=0.14.1 # the newest release that builds with rustc 1.95; later ones need 1.96
key=scale-bench
secret=scale-bench-secret
cmd=${1:?binary|start|put|stop}

is_pinned() { [ -x "$1" ] && [ "$("$1" --version 2>/dev/null)" = "s3s-fs $VERSION" ]; }

case $cmd in
binary)
    dir=$(realpath -m "${2:?DIR}")
    if [ -n "${S3S_FS:-}" ]; then
        is_pinned "$S3S_FS" || { echo "S3S_FS=$S3S_FS is not s3s-fs $VERSION" >&2; exit 1; }
        echo "$S3S_FS"
        exit 0
    fi
    for b in "$(command -v s3s-fs || true)" "$dir/bin/s3s-fs"; do
        if [ -n "$b" ] && is_pinned "$b"; then echo "$b"; exit 0; fi
    done
    profile=()
    case ${S3S_PROFILE:-ci} in
    ci) profile=(--debug) ;;
    release) ;;
    *) echo "S3S_PROFILE is ci or release" >&2; exit 2 ;;
    esac
    started=$SECONDS
    mkdir -p "$dir"
    CARGO_TARGET_DIR="$dir/target" CARGO_PROFILE_DEV_DEBUG=0 CARGO_PROFILE_DEV_INCREMENTAL=false \
        cargo install "s3s-fs@$VERSION" --locked --features binary --root "$dir" --quiet \
        "${profile[@]}" >&2
    rm -rf "$dir/target"
    echo "built s3s-fs $VERSION (${S3S_PROFILE:-ci}) in $((SECONDS - started)) s" >&2
    echo "$dir/bin/s3s-fs"
    ;;
start)
    dir=$(realpath -m "${2:?DIR}")
    bin=$("$0" binary "$dir/install")
    mkdir -p "$dir/root"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    RUST_LOG=${RUST_LOG:-warn} "$bin" --host 127.0.0.1 --port "$port" \
        --access-key "$key" --secret-key "$secret" "$dir/root" >"$dir/s3s.log" 2>&1 &
    echo $! >"$dir/s3s.pid"
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        kill -0 "$(cat "$dir/s3s.pid")" 2>/dev/null || { cat "$dir/s3s.log" >&2; exit 1; }
        sleep 0.1
    done
    echo "export AWS_ENDPOINT=http://127.0.0.1:$port AWS_ENDPOINT_URL=http://127.0.0.1:$port"
    echo "export AWS_ACCESS_KEY_ID=$key AWS_SECRET_ACCESS_KEY=$secret AWS_REGION=us-east-1"
    echo "export AWS_DEFAULT_REGION=us-east-1 AWS_ALLOW_HTTP=true"
    ;;
put)
    src=${2:?SRC}
    url=${3:?s3://BUCKET/PREFIX}
    : "${AWS_ENDPOINT_URL:?eval the output of start first}"
    rest=${url#s3://}
    bucket=${rest%%/*}
    prefix=${rest#"$bucket"}
    prefix=${prefix#/}
    prefix=${prefix%/}
    s3curl() {
        curl -gsS --aws-sigv4 "aws:amz:$AWS_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
            -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@"
    }
    export -f s3curl
    # The bucket: created, or already there (BucketAlreadyOwnedByYou is a 409).
    code=$(s3curl -o /dev/null -w '%{http_code}' -X PUT "$AWS_ENDPOINT_URL/$bucket" || true)
    case $code in 200|409) ;; *) echo "create bucket $bucket: HTTP $code" >&2; exit 1 ;; esac
    # Each file name goes last (-n 1), not through -I, whose placeholder would be replaced
    # inside SRC's own path too.
    (cd "$src" && find . -type f -printf '%P\0') |
        xargs -0 -P 4 -n 1 bash -c 's3curl -f -o /dev/null -T "$1/$3" "$2/$3"' _ "$src" \
            "$AWS_ENDPOINT_URL/$bucket${prefix:+/$prefix}"
    ;;
stop)
    dir=$(realpath -m "${2:?DIR}")
    if [ -f "$dir/s3s.pid" ]; then
        pid=$(cat "$dir/s3s.pid")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        rm -f "$dir/s3s.pid"
    fi
    ;;
*)
    echo "usage: $0 binary|start|stop DIR, or $0 put SRC s3://BUCKET/PREFIX" >&2
    exit 2
    ;;
esac
