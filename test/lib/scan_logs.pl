#!/usr/bin/perl
# scan_logs.pl LOG...: applies LogScan (test/lib/LogScan.pm) to each server
# log, with the kills and stops announced in <log>.expected_signals. Prints
# every problem line; exits 1 if there is any, 2 if no log was given.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use LogScan;

die "usage: scan_logs.pl LOG...\n" unless @ARGV;
my $bad = 0;
for my $f (@ARGV)
{
	open my $fh, '<', $f or do { print "FAIL: cannot read $f: $!\n"; $bad = 1; next };
	local $/;
	my $text = <$fh>;
	close $fh;
	my @p = LogScan::problems($text, LogScan::announced_in("$f.expected_signals"));
	next unless @p;
	print "FAIL: $f:\n", map { "$_\n" } @p;
	$bad = 1;
}
exit $bad;
