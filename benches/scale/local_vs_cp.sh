#!/usr/bin/env bash
# Local conversion against `cp -r` of its output, interleaved (benches/scale/README.md, "Local
# conversion against cp (session 8)"): each round runs `cp -r` of the reference output, then
# every binary given, each converting the checkpoint locally with --dequantize, --no-sync; every
# output is compared byte for byte with the reference (the first binary's output, made first).
# Prints each run's wall time, CPU and peak RSS, then the medians and each binary's ratio to cp's
# median (the target of issue 44: <= 1.25 x cp).
#
#   benches/scale/local_vs_cp.sh /work/scale-data/small /tmp/lvc BASELINE [CANDIDATE ...]
#
# ROUNDS (default 5), SHARD (500MB), QUIET_FILE (pause between runs while that file exists).
# WORK's outputs are removed on exit.
set -euo pipefail
IN=$(realpath "${1:?IN (a generate.py output folder)}")
W=$(realpath -m "${2:?WORK}")
shift 2
[ $# -ge 1 ] || { echo "give at least one convert binary" >&2; exit 2; }
BINS=()
for b in "$@"; do BINS+=("$(realpath "$b")"); done
ROUNDS=${ROUNDS:-5}
SHARD=${SHARD:-500MB}
mkdir -p "$W"
cleanup() { rm -rf "$W/ref" "$W/out" "$W"/time.*; }
trap cleanup EXIT
quiet() { [ -z "${QUIET_FILE:-}" ] || while [ -e "$QUIET_FILE" ]; do sleep 20; done; }
args() { # OUT: the conversion's arguments
    echo "$IN/model.safetensors.index.json --dequantize --max-shard-size $SHARD -o $1/model.safetensors --no-sync --quiet"
}

rm -rf "$W/ref" && mkdir -p "$W/ref"
# shellcheck disable=SC2046 # paths without spaces
"${BINS[0]}" $(args "$W/ref")
cat "$IN"/*.safetensors >/dev/null # the input in the page cache, as cp's input is
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$W/raw.tsv"
run() { # NAME COMMAND...
    local name=$1
    shift
    quiet
    rm -rf "$W/out" && mkdir -p "$W/out"
    sync -f "$W" # earlier rounds' write-back not in this one
    /usr/bin/time -f "%e %U %S %M" -o "$W/time.$name" "$@"
    read -r wall user sys rss <"$W/time.$name"
    printf '%s\t%s\t%s\t%s\n' "$name" "$wall" "$(echo "$user + $sys" | bc)" "$((rss / 1024))" |
        tee -a "$W/raw.tsv"
}
for r in $(seq 1 "$ROUNDS"); do
    run cp cp -r "$W/ref/." "$W/out/"
    for i in "${!BINS[@]}"; do
        # shellcheck disable=SC2046
        run "bin$i" "${BINS[$i]}" $(args "$W/out")
        for f in "$W/ref"/*; do cmp "$f" "$W/out/$(basename "$f")"; done
    done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$W/raw.tsv" "$@" <<'EOF'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()]
bins = sys.argv[2:]
def med(name, col):
    return statistics.median(float(r[col]) for r in rows if r[0] == name)
cp = med("cp", 1)
for name, label in [("cp", "cp -r")] + [(f"bin{i}", b) for i, b in enumerate(bins)]:
    walls = sorted(float(r[1]) for r in rows if r[0] == name)
    print(f"{label}: wall {med(name, 1):.2f} s ({walls[0]:.2f}-{walls[-1]:.2f}), "
          f"CPU {med(name, 2):.2f} s, peak RSS {med(name, 3):.0f} MiB, "
          f"{med(name, 1) / cp:.2f} x cp")
EOF
