#!/bin/bash
# The GPU forms of the proofs (tests named test_gpu_*) on the pristine and +fixed builds of the v4 and latest sets,
# on a machine with CUDA and no network: T3 (torch's own nn.DataParallel) and T1 (the allocator warm-up on CUDA, two
# gloo ranks on one GPU). The wheels come in .whl/ (how to fill it: docs/proof-contract.md#the-gpu-forms-on-a-gpu).
set -u
cd "$(dirname "$0")/../.." || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(), torch.cuda.device_count())"
inst() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "/tmp/$1" "${@:2}" || exit 1; }
inst v4-pristine .whl/transformers-4.57.6-py3-none-any.whl .whl/accelerate-1.15.0-py3-none-any.whl .whl/dep4/*.whl .whl/dep/*.whl
inst v4-fixed .whl/transformers-4.57.6+fixed-*.whl .whl/accelerate-1.15.0+fixed-*.whl .whl/dep4/*.whl .whl/dep/*.whl
inst latest-pristine .whl/transformers-5.24.0-py3-none-any.whl .whl/accelerate-1.15.0-py3-none-any.whl .whl/dep/*.whl
inst latest-fixed .whl/transformers-5.24.0+fixed-*.whl .whl/accelerate-1.15.0+fixed-*.whl .whl/dep/*.whl
for env in v4-pristine v4-fixed latest-pristine latest-fixed; do
    files=(tests/proof/test_t3_dataparallel_num_items.py)
    [[ $env == v4-* ]] && files+=(tests/proof/test_t1_warmup_tp_plan.py)
    echo "=== $env"
    PYTHONPATH=/tmp/$env python3 -c "import transformers, accelerate; print(transformers.__version__, transformers.__file__, accelerate.__version__)"
    PYTHONPATH=/tmp/$env timeout 240 python3 -m pytest "${files[@]}" -k gpu -p no:cacheprovider -rA -v --proof-package transformers 2>&1 | tee "${OUT:-/tmp}/$env.log" | grep -vE "^\s*$" | tail -25
done
