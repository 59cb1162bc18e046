#!/usr/bin/env bash
# One-shot GPU check: calibrate this machine with the cuda backend, validate one model's TP layer
# at every TP degree the GPUs allow, and print a short summary (GEMM TFLOP/s by shape against the
# peak, copy bandwidth, collective bus bandwidth, predicted vs measured layer time).
#
# Works with a release binary built elsewhere and copied over (no Rust toolchain, no network):
#   scp target/release/tpsim scripts/with-cuda-libs scripts/gpu-check.sh gpu-host:tpsim-check/
#   ssh gpu-host 'cd tpsim-check && ./gpu-check.sh --tpsim ./tpsim --model llama3-8b'
# Output: OUT/ (default gpu-check-DATE) with calibrated.yaml, calibrate.txt, validate.json,
# validate.txt and summary.md — the file to commit under reports/calibration/.
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
tpsim=""
model="llama3-8b"
base="h100-sxm-80g"
out=""
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tpsim) tpsim="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --gpu) base="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$tpsim" ]; then
  for c in "$here/tpsim" ./tpsim "$here/../target/release/tpsim"; do
    [ -x "$c" ] && { tpsim="$c"; break; }
  done
fi
[ -x "$tpsim" ] || { echo "gpu-check: no tpsim binary; pass --tpsim PATH" >&2; exit 2; }
wrap="$here/with-cuda-libs"
[ -x "$wrap" ] || { echo "gpu-check: $wrap missing; copy scripts/with-cuda-libs next to this script" >&2; exit 2; }

date_tag=$(date -u +%Y-%m-%d)
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
gpu_count=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
[ -n "$gpu_name" ] || gpu_name="unknown GPU (nvidia-smi failed)"
slug=$(echo "$gpu_name" | tr 'A-Z ' 'a-z-' | tr -cd 'a-z0-9-')
out="${out:-gpu-check-$date_tag-$slug}"
mkdir -p "$out"

extra=()
[ "$quick" = 1 ] && extra=(--max-message 64MiB --sweep 1024,4096,8192 --reps 5 --warmup 2)

echo "== $date_tag: $gpu_count x $gpu_name; model $model; binary $tpsim" | tee "$out/summary.md"
echo "== calibrate" >&2
"$wrap" "$tpsim" calibrate --backend cuda --model "$model" --gpu "$base" \
  --output "$out/calibrated.yaml" "${extra[@]}" >"$out/calibrate.txt" 2>"$out/calibrate.err"
cal_rc=$?
echo "calibrate exit $cal_rc" | tee -a "$out/summary.md"
[ $cal_rc -ne 0 ] && tail -n 5 "$out/calibrate.err" | tee -a "$out/summary.md"

val_rc=99
if [ $cal_rc -eq 0 ]; then
  echo "== validate" >&2
  for tp in 1 2 4 8; do
    [ "$tp" -le "$gpu_count" ] || [ "$tp" -eq 1 ] || continue
    "$wrap" "$tpsim" validate --backend cuda --model "$model" --calibration "$out/calibrated.yaml" \
      --tp "$tp" --format json >"$out/validate-tp$tp.json" 2>>"$out/validate.err"
    val_rc=$?
    echo "validate tp $tp exit $val_rc" | tee -a "$out/summary.md"
  done
fi

{
  echo
  echo '```'
  # GEMM table (TFLOP/s by shape against peak), the curve, copy, collectives: the calibrate summary.
  grep -E "calibrated on|fwd|GEMM curve|copy:|AllReduce|AllGather|ReduceScatter|SendRecv|profile:|note:" "$out/calibrate.txt" || true
  echo '```'
} | tee -a "$out/summary.md"

if command -v python3 >/dev/null; then
  python3 - "$out" <<'PY' | tee -a "$out/summary.md"
import glob, json, sys
rows = []
for path in sorted(glob.glob(f"{sys.argv[1]}/validate-tp*.json")):
    try:
        rows += json.load(open(path))
    except Exception as e:
        print(f"{path}: unreadable ({e})")
print("\n| tp | sp | ranks run | layer ms predicted | layer ms measured | error % | comm ms pred | comm ms meas | numerics |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    num = "not checked" if r["max_relative_error"] is None else f'{r["max_relative_error"]:.1e} (tol {r["tolerance"]:.0e})'
    print(f'| {r["tp"]} | {r["sequence_parallel"]} | {r["ranks_run"]} | {r["predicted_layer_ms"]:.3f} | '
          f'{r["measured_layer_ms"]:.3f} | {100*r["layer_error"]:+.1f} | {r["predicted_comm_ms"]:.3f} | '
          f'{r["measured_comm_ms"]:.3f} | {num} |')
    for n in r["notes"]:
        print(f'  - tp {r["tp"]}: {n}')
PY
else
  cat "$out"/validate-tp*.json | tee -a "$out/summary.md"
fi
echo "wrote $out/summary.md (commit it as reports/calibration/$date_tag-$slug.md)"
[ $cal_rc -eq 0 ] && [ $val_rc -eq 0 ]
