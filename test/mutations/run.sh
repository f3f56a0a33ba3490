#!/usr/bin/env bash
# test/mutations/run.sh: plants each fault of test/mutations/faults.txt in
# turn (one file edit), rebuilds what the fault's killer needs, runs that
# killer (one unit-test filter, test/http, the regression test or one TAP
# file), restores the file and records KILLED or SURVIVED. Fails if any
# fault survives, if a fault's original text is not found exactly once (the
# list must follow the code), or if a mutant does not build.
#
#   test/mutations/run.sh              every fault
#   test/mutations/run.sh NAME...      only these
#   test/mutations/run.sh --check      only check the list against the code
#                                      (every original text found once, every
#                                      killer exists; seconds, no build)
#   test/mutations/run.sh --rotation N K   the faults whose position in the
#                                      list is K modulo N (CI runs a different
#                                      share each day: see test/README.md)
#   ./test/run_all.sh --only mutations (the same, as a stage)
#
# Environment: PG_CONFIG (the installation the extension goes into, as for
# test/run_all.sh), MUTATION_TIMEOUT (seconds per killer, default 300),
# MUTATIONS_OUT (logs and summary, default test/mutations/output).
# At the end (also when interrupted) every file is restored and the clean
# tree is built and installed again.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LIST=$REPO/test/mutations/faults.txt
OUT=${MUTATIONS_OUT:-$REPO/test/mutations/output}
TIMEOUT=${MUTATION_TIMEOUT:-300}
export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
CHECK_ONLY=0 ROT_N=0 ROT_K=0
case "${1:-}" in
--check) CHECK_ONLY=1; shift ;;
--rotation)
	[[ "${2:-}" =~ ^[1-9][0-9]*$ && "${3:-}" =~ ^[0-9]+$ ]] || { echo "mutations: --rotation N K" >&2; exit 2; }
	ROT_N=$2 ROT_K=$(($3 % $2)); shift 3 ;;
esac

die() { echo "mutations: $*" >&2; exit 2; }

# ---- the list
NAMES=() FILES=() FROMS=() TOS=() KILLS=() WHYS=()
add_fault() {
	[ -n "$name" ] || return 0
	[ -n "$file" ] && [ -n "$from" ] && [ -n "$kill" ] && [ -n "$why" ] ||
		die "fault [$name]: file, from, to, kill and why are all needed"
	local n
	for n in "${NAMES[@]}"; do [ "$n" != "$name" ] || die "fault [$name] is listed twice"; done
	NAMES+=("$name") FILES+=("$file") FROMS+=("$from") TOS+=("$to") KILLS+=("$kill") WHYS+=("$why")
}
name="" file="" from="" to="" kill="" why=""
while IFS= read -r line || [ -n "$line" ]; do
	case "$line" in
	'#'* | '') continue ;;
	'['*']')
		add_fault
		name=${line#[}; name=${name%]}; file="" from="" to="" kill="" why="" ;;
	'file = '*) file=${line#file = } ;;
	'from = '*) from=${line#from = } ;;
	'to   = '*) to=${line#to   = } ;;
	'kill = '*) kill=${line#kill = } ;;
	'why  = '*) why=${line#why  = } ;;
	*) die "cannot read this line of $LIST: $line" ;;
	esac
done <"$LIST"
add_fault

# count_or_apply MODE FILE FROM TO: MODE count prints how often FROM occurs;
# MODE apply replaces its one occurrence by TO. {NL} is a line break.
count_or_apply() {
	MODE=$1 F=$2 FROM=$3 TO=$4 perl -e '
		my ($mode, $f) = @ENV{qw(MODE F)};
		my ($from, $to) = map { s/\{NL\}/\n/gr } @ENV{qw(FROM TO)};
		open my $fh, "<", $f or die "$f: $!\n";
		local $/; my $text = <$fh>; close $fh;
		my ($n, $at) = (0, -1);
		while (($at = index($text, $from, $at + 1)) >= 0) { $n++ }
		if ($mode eq "count") { print "$n\n"; exit 0 }
		die "$f: the original text occurs $n times\n" unless $n == 1;
		substr($text, index($text, $from), length $from) = $to;
		open $fh, ">", $f or die "$f: $!\n";
		print $fh $text; close $fh;'
}

SELECTED=("$@")
selected() {
	[ ${#SELECTED[@]} -eq 0 ] && return 0
	local s
	for s in "${SELECTED[@]}"; do [ "$s" = "$1" ] && return 0; done
	return 1
}
for s in "${SELECTED[@]}"; do
	printf '%s\n' "${NAMES[@]}" | grep -qxF "$s" || die "no fault named $s in $LIST"
done

# Every original text must be there exactly once before anything is planted;
# every fault that is not is named, then the run stops.
WRONG=0
wrong() { echo "mutations: fault [${NAMES[$i]}]: $*" >&2; WRONG=$((WRONG + 1)); }
for i in "${!NAMES[@]}"; do
	f=$REPO/${FILES[$i]}
	if [ ! -f "$f" ]; then
		wrong "no file ${FILES[$i]}"
		continue
	fi
	n=$(count_or_apply count "$f" "${FROMS[$i]}" "")
	[ "$n" = 1 ] || wrong "its original text occurs $n times in ${FILES[$i]} (expected once): update $LIST"
	case "${KILLS[$i]}" in
	unit\ * | http-unit\ * | http | regress | engine) ;;
	tap\ *) [ -f "$REPO/test/t/${KILLS[$i]#tap }" ] || wrong "no TAP file ${KILLS[$i]#tap }" ;;
	*) wrong "unknown killer '${KILLS[$i]}'" ;;
	esac
done
[ $WRONG -eq 0 ] || die "$WRONG of ${#NAMES[@]} faults do not match the code"
echo "mutations: ${#NAMES[@]} faults listed, every original text found once"
[ $CHECK_ONLY -eq 1 ] && exit 0
if [ $ROT_N -gt 0 ]; then
	[ ${#SELECTED[@]} -eq 0 ] || die "--rotation takes no fault names"
	for i in "${!NAMES[@]}"; do
		[ $((i % ROT_N)) -eq $ROT_K ] && SELECTED+=("${NAMES[$i]}")
	done
	echo "mutations: rotation $ROT_K of $ROT_N: ${SELECTED[*]}"
fi
mkdir -p "$OUT"
rm -f "$OUT"/*.log "$OUT"/summary.txt

# ---- planting
BACKUP=$(mktemp)
PLANTED=""
restore() {
	if [ -n "$PLANTED" ]; then
		cp "$BACKUP" "$PLANTED" && touch "$PLANTED"
		PLANTED=""
	fi
}
final() {
	restore
	rm -f "$BACKUP"
	echo "mutations: rebuilding and installing the clean tree"
	"$REPO/test/run_all.sh" --only build,install >"$OUT/clean-build.log" 2>&1 ||
		echo "mutations: the clean rebuild FAILED (see $OUT/clean-build.log)" >&2
	make -C "$REPO/test/unit" build/plain/unit_tests >>"$OUT/clean-build.log" 2>&1
	make -C "$REPO/test/http" >>"$OUT/clean-build.log" 2>&1
	make -C "$REPO/test/engine" build >>"$OUT/clean-build.log" 2>&1
}
trap final EXIT
trap 'exit 130' INT TERM

# build KILL: builds what the killer runs against.
build() {
	case "$1" in
	unit\ *) make -C "$REPO/test/unit" build/plain/unit_tests ;;
	http-unit\ *) make -C "$REPO/test/http" build/test_request ;;
	http) make -C "$REPO/test/http" ;;
	engine) make -C "$REPO/test/engine" build ;;
	regress | tap\ *) "$REPO/test/run_all.sh" --only build,install ;;
	esac
}
# killer KILL: runs it; non-zero means the fault was caught.
killer() {
	case "$1" in
	unit\ *) "$REPO/test/unit/build/plain/unit_tests" --gtest_filter="${1#unit }" ;;
	http-unit\ *) "$REPO/test/http/build/test_request" --gtest_filter="${1#http-unit }" ;;
	http) (cd "$REPO/test/http" && ./run.sh build/driver) ;;
	engine) SIM_SEEDS=${MUTATION_SIM_SEEDS:-3000} "$REPO/test/engine/build/plain/sim" ;;
	regress) "$REPO/test/run_all.sh" --only regress ;;
	tap\ *) PROVE_TESTS="test/t/${1#tap }" "$REPO/test/run_all.sh" --only tap ;;
	esac
}

RESULTS=()
SURVIVED=0
BROKEN=0
for i in "${!NAMES[@]}"; do
	selected "${NAMES[$i]}" || continue
	nm=${NAMES[$i]} f=$REPO/${FILES[$i]} log=$OUT/${NAMES[$i]}.log
	t0=$(date +%s)
	cp "$f" "$BACKUP"
	PLANTED=$f
	if ! count_or_apply apply "$f" "${FROMS[$i]}" "${TOS[$i]}" >"$log" 2>&1; then
		restore
		RESULTS+=("$nm|NOT PLANTED|0|${KILLS[$i]}")
		BROKEN=$((BROKEN + 1))
		continue
	fi
	{
		echo "=== fault $nm in ${FILES[$i]}: ${WHYS[$i]}"
		(cd "$REPO" && git diff --no-color -- "${FILES[$i]}")
		echo "=== build"
	} >>"$log" 2>&1
	if ! build "${KILLS[$i]}" >>"$log" 2>&1; then
		restore
		RESULTS+=("$nm|DOES NOT BUILD|$(($(date +%s) - t0))|${KILLS[$i]}")
		BROKEN=$((BROKEN + 1))
		continue
	fi
	echo "=== killer: ${KILLS[$i]}" >>"$log"
	timeout --kill-after=20 "$TIMEOUT" bash -c "$(declare -f killer); REPO='$REPO'; killer '${KILLS[$i]}'" >>"$log" 2>&1
	rc=$?
	restore
	secs=$(($(date +%s) - t0))
	if [ $rc -eq 0 ]; then
		RESULTS+=("$nm|SURVIVED|$secs|${KILLS[$i]}")
		SURVIVED=$((SURVIVED + 1))
	elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
		RESULTS+=("$nm|KILLED (timeout)|$secs|${KILLS[$i]}")
	else
		RESULTS+=("$nm|KILLED|$secs|${KILLS[$i]}")
	fi
	echo "mutations: $nm: $(echo "${RESULTS[-1]}" | cut -d'|' -f2) in ${secs}s by ${KILLS[$i]}"
done

{
	printf '%-36s %-16s %6s  %s\n' fault result secs killer
	for r in "${RESULTS[@]}"; do
		IFS='|' read -r nm st secs k <<<"$r"
		printf '%-36s %-16s %6s  %s\n' "$nm" "$st" "$secs" "$k"
	done
	echo "mutations: ${#RESULTS[@]} planted, $SURVIVED survived, $BROKEN not planted or not building"
} | tee "$OUT/summary.txt"
[ $SURVIVED -eq 0 ] && [ $BROKEN -eq 0 ] && [ ${#RESULTS[@]} -gt 0 ]
