#!/usr/bin/env bash
# Times the stages of `make test` and prints them as a table at the end, or as soon as a stage
# fails (then with that stage marked), so that every run says where its time went.
#
#   scripts/stages.sh begin                 start a new record
#   scripts/stages.sh run NAME CMD [ARG...] run one stage, record its seconds and exit status
#   scripts/stages.sh report                print the table and the total
#
# The record is a TSV file, $STAGES_FILE (default .stages.tsv in the current folder).
set -uo pipefail
file="${STAGES_FILE:-.stages.tsv}"

report() {
  local total=0 name secs rc
  printf '\n%-16s %9s  %s\n' "stage" "time" "result"
  while IFS=$'\t' read -r name secs rc; do
    total=$((total + secs))
    printf '%-16s %4d:%02d  %s\n' "$name" $((secs / 60)) $((secs % 60)) "$([ "$rc" = 0 ] && echo passed || echo "FAILED ($rc)")"
  done <"$file"
  printf '%-16s %4d:%02d\n' "total" $((total / 60)) $((total % 60))
}

case "${1:-}" in
  begin) : >"$file" ;;
  run)
    name="$2"; shift 2
    start=$SECONDS
    "$@"; rc=$?
    printf '%s\t%d\t%d\n' "$name" $((SECONDS - start)) "$rc" >>"$file"
    if [ "$rc" != 0 ]; then report; fi
    exit "$rc" ;;
  report) report ;;
  *) echo "usage: $0 begin | run NAME CMD [ARG...] | report" >&2; exit 2 ;;
esac
