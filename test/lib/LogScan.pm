# LogScan: the one rule that decides whether a server log shows a process
# that died when nothing asked it to. Used by PgbusNode (each TAP test's own
# log) and by test/lib/scan_logs.pl (test/run_all.sh's logs stage, over every
# log of a run, the browser stage's included).
#
#   my @bad = LogScan::problems($log_text, @announced);
#
# A line is a problem when it says that a process
#   - was "terminated by signal" (a crash), or
#   - "exited with exit code N" (N > 0) while the server was neither
#     stopping nor restarting after a crash (a background worker that left
#     its loop: a caught C++ exception, a failed setup, an unexpected
#     SIGTERM), or
#   - stopped with "pgbus_stream: worker stopped:" (a C++ exception caught
#     at the worker's entry point),
# or when it is a FATAL or PANIC line of the extension (one that names
# pgbus other than inside a path, such as the socket directory of a
# standby's failed connection to its stopped primary), or any PANIC.
# A line that contains one of the @announced fixed strings is no problem:
# tests announce the kills and stops they cause (PgbusNode::expect_kill,
# expect_exit). Exits are expected from "received ... shutdown request" until
# the server is ready again, and after an announced crash until the server
# has reinitialized.
package LogScan;

use strict;
use warnings;

sub problems
{
	my ($text, @announced) = @_;
	my @bad;
	my $stopping = 0;    # shutting down, or reinitializing after a crash
	for my $l (split /\n/, $text)
	{
		my $excused = grep { length $_ && index($l, $_) >= 0 } @announced;
		if ($l =~ /received (?:smart|fast|immediate) shutdown request|terminating any other active server processes/)
		{
			$stopping = 1;
		}
		elsif ($l =~ /database system is ready to accept (?:read-only )?connections/)
		{
			$stopping = 0;
		}
		if ($excused)
		{
			$stopping = 1 if $l =~ /terminated by signal/;
			next;
		}
		if ($l =~ /terminated by signal/
			|| ($l =~ /exited with exit code [1-9]/ && !$stopping)
			|| $l =~ /pgbus_stream: worker stopped:/
			|| ($l =~ /\b(?:FATAL|PANIC):/ && $l =~ m{(?<![/\w.-])pgbus})
			|| $l =~ /\bPANIC:/)
		{
			push @bad, $l;
			# What follows a crash (other processes stopped, reinitialization)
			# is its consequence, not a second problem.
			$stopping = 1 if $l =~ /terminated by signal/;
		}
	}
	return @bad;
}

# announced_in returns the fixed strings listed in $file (one per line), or
# nothing when it does not exist.
sub announced_in
{
	my ($file) = @_;
	open my $fh, "<", $file or return ();
	local $/ = "\n";
	my @a = grep { length } map { s/\r?\n\z//r } <$fh>;
	close $fh;
	return @a;
}

1;
