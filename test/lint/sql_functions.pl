#!/usr/bin/env perl
# test/lint/sql_functions.pl: every C SQL function goes through the boundary
# wrapper. A C function is written as
#
#     PGBS_SQL_FUNCTION(pgbus_stream_x) { ... }
#
# (src/pg/guard.hpp), which declares PG_FUNCTION_INFO_V1 and runs the body
# inside pg::entry(). Fails, with file and line, when a source outside
# src/pg/guard.hpp writes PG_FUNCTION_INFO_V1 or defines a function taking
# PG_FUNCTION_ARGS by hand, or when a symbol an install or upgrade script
# names after 'MODULE_PATHNAME' is not defined with the macro. Run by
# test/run_all.sh (stage checks).
use strict;
use warnings;

my $repo = $ARGV[0] // '.';
chdir $repo or die "sql_functions: cannot enter $repo: $!\n";
my $guard = 'src/pg/guard.hpp';

my @sources = grep { $_ ne $guard } split /\n/, `find src -type f \\( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \\) | sort`;
my ($bad, %defined) = (0);
for my $f (@sources) {
	open my $in, '<', $f or die "sql_functions: cannot read $f: $!\n";
	while (my $l = <$in>) {
		$defined{$1} = "$f:$." if $l =~ /^\s*PGBS_SQL_FUNCTION\((\w+)\)/;
		if ($l =~ /\bPG_FUNCTION_INFO_V1\s*\(/) {
			print "$f:$.: PG_FUNCTION_INFO_V1 by hand: write PGBS_SQL_FUNCTION(name) { ... } (src/pg/guard.hpp)\n";
			$bad++;
		}
		if ($l =~ /^\s*(?:extern\s+"C"\s+)?(?:PGDLLEXPORT\s+)?Datum\s+(\w+)\s*\(\s*PG_FUNCTION_ARGS\s*\)\s*\{/) {
			print "$f:$.: $1 is defined by hand: write PGBS_SQL_FUNCTION($1) { ... } (src/pg/guard.hpp)\n";
			$bad++;
		}
	}
	close $in;
}

my %named;
for my $f (sort glob 'sql/pgbus_stream--*.sql') {
	open my $in, '<', $f or die "sql_functions: cannot read $f: $!\n";
	my $text = do { local $/; <$in> };
	close $in;
	$named{$1} //= $f while $text =~ /'MODULE_PATHNAME'\s*,\s*'(\w+)'/g;
}
for my $sym (sort keys %named) {
	next if $defined{$sym};
	print "$named{$sym}: $sym is not defined with PGBS_SQL_FUNCTION($sym) in src/\n";
	$bad++;
}
die "sql_functions: no C SQL function found (wrong directory?)\n" unless %named && %defined;
if ($bad) {
	print "sql_functions: $bad problem(s)\n";
	exit 1;
}
printf "sql_functions: %d C SQL functions, each through PGBS_SQL_FUNCTION\n", scalar keys %named;
