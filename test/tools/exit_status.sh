#!/bin/sh
# exit_status.sh CMD [ARGS...]: runs CMD and prints "exit status N" as its
# last line. For ctest entries judged by PASS_REGULAR_EXPRESSION, which
# ignores the exit code: their FAIL_REGULAR_EXPRESSION "exit status [1-9]"
# fails them when CMD fails (a sanitizer's report exits with 1 or 23, a
# signal gives 128 + its number).
"$@"
rc=$?
echo "exit status $rc"
exit "$rc"
