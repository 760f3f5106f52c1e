#!/usr/bin/env bash
# A real S3 server (s3s-fs, a Rust S3 implementation over a folder) for the scale benchmarks
# and benches/scale/ci.sh: buckets are the folder's subfolders, objects its files.
#
#   benches/scale/s3_server.sh start DIR     # prints "export ..." lines: eval them
#   benches/scale/s3_server.sh stop DIR
#
# `start` picks a free loopback port, starts the server over DIR/root with fixed keys, waits
# until it answers, and leaves its pid in DIR/s3s.pid and its log in DIR/s3s.log. Buckets are
# made with `mkdir DIR/root/BUCKET`; objects can be laid in as files (the server reads ETags
# and lengths from the files), or uploaded by any client.
#
# The binary: $S3S_FS, else s3s-fs on PATH, else /work/tools/bin/s3s-fs. Install it with
#   cargo install s3s-fs@0.14.1 --locked --features binary --root /work/tools
# (0.14.1 is the newest release that builds with rustc 1.95; later ones need 1.96).
set -euo pipefail
cmd=${1:?start|stop}
dir=$(realpath -m "${2:?DIR}")
bin=${S3S_FS:-$(command -v s3s-fs || echo /work/tools/bin/s3s-fs)}
key=scale-bench
secret=scale-bench-secret
case $cmd in
start)
    [ -x "$bin" ] || { echo "s3s-fs not found (set S3S_FS): $bin" >&2; exit 1; }
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
stop)
    if [ -f "$dir/s3s.pid" ]; then
        kill "$(cat "$dir/s3s.pid")" 2>/dev/null || true
        rm -f "$dir/s3s.pid"
    fi
    ;;
*)
    echo "usage: $0 start|stop DIR" >&2
    exit 2
    ;;
esac
