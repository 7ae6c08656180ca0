# KTAP output, the kernel selftests' format (tools/testing/selftests/kselftest/ktap_helpers.sh):
# a header and a plan, then one result line per test; "#" lines are diagnostics. cargo xtask test
# parses it and checks that every planned test reported.
#
# ktap_plan N                 the header and the plan
# ktap_pass NAME [NOTE]       ok K NAME         (NOTE as a diagnostic line)
# ktap_fail NAME [NOTE]       not ok K NAME
# ktap_skip NAME REASON       ok K NAME # SKIP REASON
# ktap_result NAME CMD...     pass if CMD succeeds, else fail
# ktap_failed                 true once any test failed
KTAP_NUMBER=0
KTAP_FAILURES=0

ktap_plan() {
    echo "TAP version 13"
    echo "1..$1"
}

ktap_pass() {
    KTAP_NUMBER=$((KTAP_NUMBER + 1))
    [ -n "${2:-}" ] && echo "# $1: $2"
    echo "ok $KTAP_NUMBER $1"
}

ktap_fail() {
    KTAP_NUMBER=$((KTAP_NUMBER + 1))
    KTAP_FAILURES=$((KTAP_FAILURES + 1))
    [ -n "${2:-}" ] && echo "# $1: $2"
    echo "not ok $KTAP_NUMBER $1"
}

ktap_skip() {
    KTAP_NUMBER=$((KTAP_NUMBER + 1))
    echo "ok $KTAP_NUMBER $1 # SKIP $2"
}

ktap_result() {
    local name=$1
    shift
    if "$@"; then ktap_pass "$name"; else ktap_fail "$name"; fi
}

ktap_failed() {
    [ "$KTAP_FAILURES" -gt 0 ]
}
