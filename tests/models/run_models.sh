#!/usr/bin/env bash
# End-to-end model check: export the listed models (when missing or older than the exporter) and
# compare `kiln run --reference` with PyTorch on each.
#
# Usage: tests/models/run_models.sh MODEL_DIR KILN [NAME...]
#   MODEL_DIR  where the exported models live (e.g. bench/models/out); created if needed
#   KILN       path to the kiln binary
#   NAME...    models to check (default: every model make_models.py knows)
# Environment: KILN_MODEL_TOL overrides the relative-error tolerance (default 1e-4);
#              KILN_EXPORTER names the exporter (default bench/models/make_models.py; e.g.
#              bench/models/extra_models.py, same command line and files);
#              KILN_RUN_MODE=fused-plan runs the fusion plan kernel by kernel instead of --reference;
#              KILN_RUN_MODE=check runs the compiled executable and compares every kernel with the reference;
#              KILN_RUN_MODE=check-strict does so under --strict-fp, where every kernel must be bit-identical;
#              KILN_DEVICE=opencl|cuda runs the compiled executable's kernels on that device (kiln run --device).
# Exits nonzero when any model fails to export or to match.
set -uo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 MODEL_DIR KILN [NAME...]" >&2
  exit 2
fi
model_dir=$1
kiln=$2
shift 2

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=/usr/bin/python3
make_models="${KILN_EXPORTER:-$here/../../bench/models/make_models.py}"
check_model="$here/check_model.py"

if [ ! -x "$kiln" ]; then
  echo "run_models: kiln binary '$kiln' not found or not executable" >&2
  exit 2
fi

if [ $# -gt 0 ]; then
  names=("$@")
else
  mapfile -t names < <("$python" "$make_models" --list | awk '{print $1}')
fi

# Export only what is missing or stale: NAME.json is written last, so its presence (and being
# newer than the exporter) means the model's four files are complete and current.
stale=()
for name in "${names[@]}"; do
  if [ ! -f "$model_dir/$name.json" ] || [ "$make_models" -nt "$model_dir/$name.json" ]; then
    stale+=("$name")
  fi
done
if [ ${#stale[@]} -gt 0 ]; then
  echo "run_models: exporting ${stale[*]}"
  # PyTorch's exporter warns about things that do not matter here (e.g. fixed batch size).
  if ! "$python" -W ignore "$make_models" --out "$model_dir" "${stale[@]}"; then
    echo "run_models: export failed" >&2
    exit 1
  fi
fi

tol=${KILN_MODEL_TOL:-1e-4}
failed=()
for name in "${names[@]}"; do
  if ! "$python" "$check_model" "$kiln" "$model_dir" "$name" --tol "$tol" --mode "${KILN_RUN_MODE:-reference}" \
       ${KILN_DEVICE:+--device "$KILN_DEVICE"}; then
    failed+=("$name")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "run_models: ${#failed[@]} of ${#names[@]} failed: ${failed[*]}"
  exit 1
fi
echo "run_models: all ${#names[@]} passed"
