#!/usr/bin/env bash
# mpi_comm.sh - the multi-node communication layer under mpirun on this one
# machine: 2 and 4 nodes exchanging progress and messages, a node that
# kills itself (the others must name it, not hang), and one that fails saying why.
#   usage: mpi_comm.sh PATH/TO/test_comm
set -u
T=${1:?usage: mpi_comm.sh PATH/TO/test_comm}
MPIRUN=(mpirun --oversubscribe --mca btl_vader_single_copy_mechanism none)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dhmpi.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
source "$(dirname "$0")/lib.sh"
for np in 2 4; do
    timeout 120 "${MPIRUN[@]}" -np $np "$T" basic > "$WORK/basic$np.out" 2> "$WORK/basic$np.err"
    check "$np nodes: exit 0" test $? -eq 0
    check "$np nodes: every node passed" test "$(grep -c '^ok node' "$WORK/basic$np.out")" -eq $np
    [[ $fail -eq 0 ]] || cat "$WORK/basic$np.err"
done
# A killed node: with --enable-recovery the survivors run on and must name it.
timeout 60 "${MPIRUN[@]}" --enable-recovery -np 3 "$T" die > "$WORK/die.out" 2> "$WORK/die.err"
check "the survivors exit (no wait for the dead node in MPI_Finalize)" test $? -ne 124
check "a killed node is named by both survivors" \
    test "$(grep -c '^detected node [01]: node 2 (.*pid .*) stopped responding' "$WORK/die.out")" -eq 2
[[ $fail -eq 0 ]] || { cat "$WORK/die.out" "$WORK/die.err"; }
# A node that says why it fails and stops at once, while the others keep its thread busy:
# each other node is told why (the farewell was dropped when the stop came before the thread
# took it, and they waited out the timeout: about half the runs; a few runs make it certain).
for np in 2 2 2 3; do
    timeout 60 "${MPIRUN[@]}" --enable-recovery -np $np "$T" farewell > "$WORK/fw.out" 2> "$WORK/fw.err"
    check "a failing node's farewell reaches the $((np - 1)) other node(s)" \
        test "$(grep -c "^told node [0-9]: node $((np - 1)) (.*) failed: cannot listen" "$WORK/fw.out")" \
        -eq $((np - 1))
    [[ $fail -eq 0 ]] || { cat "$WORK/fw.out" "$WORK/fw.err"; break; }
done
echo "mpi_comm: $pass passed, $fail failed"
test $fail -eq 0
