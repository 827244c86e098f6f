#!/usr/bin/env bash
# test/sass_check.sh OBJECT [PATTERN]: the exponentials of the kernels whose names match PATTERN (default
# "attention") in a CUDA object or executable, per architecture, from cuobjdump -sass: one line per kernel with its
# MUFU.EX2 count and its count of the subnormal range check plain exp2f wraps around each one
# (FSETP.GEU ... -126, then two conditional FMULs). Exits 1 when any matching kernel has such a check, 0 otherwise
# (2 when cuobjdump or nvdisasm is missing or finds no matching kernel). Used by make test-sass; on a machine
# without them: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm and put their bin/ on PATH.
set -uo pipefail
obj=${1:?usage: test/sass_check.sh OBJECT [PATTERN]}
pat=${2:-attention}
command -v cuobjdump > /dev/null || { echo "sass_check: cuobjdump not found"; exit 2; }
bad=0 found=0
for arch in $(cuobjdump -lelf "$obj" 2>/dev/null | grep -oE 'sm_[0-9]+a?' | sort -u); do
    sass=$(cuobjdump -sass -arch "$arch" "$obj" 2>&1) || { echo "sass_check: $sass" | head -3; exit 2; }
    while read -r name ex2 chk; do
        found=$((found + 1))
        demangled=$(echo "$name" | c++filt | sed 's/(.*//')
        flag=""
        if [ "$chk" -gt 0 ]; then flag="  <-- FAIL: range-checked exponentials"; bad=1; fi
        printf '%-48s %s  MUFU.EX2 %4d  FSETP.GEU -126 %4d%s\n' "$demangled" "$arch" "$ex2" "$chk" "$flag"
    done < <(echo "$sass" | awk -v pat="$pat" '
        /Function :/ { if (name != "") print name, ex2, chk; name = $3; ex2 = 0; chk = 0; if (name !~ pat) name = ""; next }
        name != "" && /MUFU\.EX2/ { ex2++ }
        name != "" && /FSETP\.GEU/ && /-126/ { chk++ }
        END { if (name != "") print name, ex2, chk }')
done
[ $found -gt 0 ] || { echo "sass_check: no kernel matching '$pat' in $obj"; exit 2; }
exit $bad
