# 000_logscan: the server-log rule (test/lib/LogScan.pm) that every TAP test
# and the logs stage of test/run_all.sh apply, on log excerpts of the kinds
# PostgreSQL 15 writes. No server: this checks the rule itself.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use Test::More;
use LogScan;

my $ready = 'LOG:  database system is ready to accept connections';
my $w = 'LOG:  background worker "pgbus_stream worker"';
my @cases = (
	[ 'a clean start and fast stop', [], 0,
	  $ready, 'LOG:  received fast shutdown request', "$w (PID 11) exited with exit code 1",
	  'LOG:  background worker "logical replication launcher" (PID 12) exited with exit code 1' ],
	[ 'a worker exit while serving', [], 1, $ready, "$w (PID 11) exited with exit code 1" ],
	[ 'a worker stopped by a C++ exception', [], 2,
	  $ready, 'LOG:  pgbus_stream: worker stopped: std::bad_alloc', "$w (PID 11) exited with exit code 1" ],
	[ 'an announced exit', ['(PID 11) exited with exit code 1'], 0, $ready, "$w (PID 11) exited with exit code 1" ],
	[ 'an announced exit does not excuse another', ['(PID 11) exited with exit code 1'], 1,
	  $ready, "$w (PID 11) exited with exit code 1", "$w (PID 13) exited with exit code 1" ],
	[ 'a crash', [], 1, $ready, "$w (PID 11) was terminated by signal 11: Segmentation fault",
	  'LOG:  terminating any other active server processes', "$w (PID 12) exited with exit code 2" ],
	[ 'an announced kill and the restart after it', ['(PID 11) was terminated by signal 9'], 0,
	  $ready, "$w (PID 11) was terminated by signal 9: Killed",
	  'LOG:  terminating any other active server processes',
	  'LOG:  background worker "logical replication launcher" (PID 12) exited with exit code 1',
	  'LOG:  all server processes terminated; reinitializing', $ready ],
	[ 'an exit after the server is ready again', ['(PID 11) was terminated by signal 9'], 1,
	  $ready, "$w (PID 11) was terminated by signal 9: Killed", $ready, "$w (PID 14) exited with exit code 1" ],
	[ 'a restart of the server, then an exit', [], 1,
	  $ready, 'LOG:  received fast shutdown request', "$w (PID 11) exited with exit code 1", $ready,
	  "$w (PID 15) exited with exit code 1" ],
	[ 'a FATAL line of the extension', [], 1, $ready, 'FATAL:  pgbus_stream: cannot attach to shared memory' ],
	[ 'a FATAL line of a client', [], 0, $ready, 'FATAL:  terminating connection due to administrator command' ],
	[ 'a FATAL line of the extension\'s worker', [], 1, $ready,
	  'FATAL:  terminating background worker "pgbus_stream worker" due to administrator command' ],
	[ 'a FATAL line that names pgbus only in a path', [], 0, $ready,
	  'FATAL:  could not connect to the primary server: connection to server on socket '
	  . '"/tmp/pgbus-browser.6V9CyT/.s.PGSQL.24471" failed: No such file or directory' ],
	[ 'a PANIC', [], 1, $ready, 'PANIC:  could not write to file "pg_wal/xlogtemp.1"' ],
	[ 'exit code 0', [], 0, $ready, "$w (PID 11) exited with exit code 0" ],
);
for my $c (@cases)
{
	my ($name, $announced, $want, @lines) = @$c;
	my @bad = LogScan::problems(join("\n", map { "2026-01-01 00:00:00 UTC [1] $_" } @lines), @$announced);
	is(scalar @bad, $want, "$name: $want problem line(s)") or diag(join("\n", @bad));
}
done_testing();
