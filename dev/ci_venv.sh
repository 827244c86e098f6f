#!/usr/bin/env bash
# dev/ci_venv.sh [VENV]: the Python environment of the checks that compare Prism with the libraries its users use,
# at the versions of dev/ci_requirements.txt, in VENV (default /opt/prism-venv):
#   scipy                          test/test_stats.cpp: the t distribution and the study statistics against scipy's
#   tensorboard, wandb             test/test_live.cpp: the live bridge's output read back by each library's reader
#   torch, transformers, lm-eval,  make test-hf: exports loaded in transformers (logits, generate()), lm-eval's
#   accelerate                     HFLM against eval_zeroshot
#   nvidia-cuda-cuobjdump, -nvdisasm   make test-sass (the attention kernels' machine code); linked into VENV/bin
# Kept between runs on the same machine: a no-op (well under a second) when VENV's stamp says it holds this
# requirements file; otherwise it creates VENV (python3 -m venv; Debian: python3-venv, which setup.sh installs) or
# brings it to the file's versions (pip install -r: network and disk, a few minutes on a fresh machine; .ci/run runs
# this in the background while the compilers run), then writes the stamp. Exit status 0 when VENV is ready.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=${1:-/opt/prism-venv}
req=dev/ci_requirements.txt
want=$(sha256sum "$req" | cut -d' ' -f1)
stamp=$venv/.prism-requirements
if [[ -x $venv/bin/python && "$(cat "$stamp" 2>/dev/null)" == "$want" ]]; then
    echo "ci_venv: $venv holds $req"
    exit 0
fi
t0=$(date +%s)
[[ -x $venv/bin/python ]] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
# cuobjdump and nvdisasm come in the wheels' nvidia/cu*/bin: one place on PATH for make test-sass.
for tool in cuobjdump nvdisasm; do
    f=$("$venv/bin/python" -c "import glob, nvidia, os; print(next(iter(sorted(glob.glob(os.path.join(nvidia.__path__[0], 'cu*', 'bin', '$tool')))), ''))")
    [[ -n $f ]] && ln -sf "$f" "$venv/bin/$tool"
done
echo "$want" > "$stamp"
echo "ci_venv: $venv brought to $req in $(($(date +%s) - t0)) s"
