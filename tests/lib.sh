# lib.sh - what the shell tests share (sourced): a pass/fail count and its checks.
#   check NAME CONDITION-COMMAND...   counts CONDITION's success, prints "FAIL: NAME" otherwise
#   contains FILE PATTERN, not_contains FILE PATTERN   grep -q of a basic regular expression
pass=0 fail=0
check() {
    local name=$1; shift
    if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $name"; fi
}
contains() { grep -q -- "$2" "$1"; }
not_contains() { ! grep -q -- "$2" "$1"; }
