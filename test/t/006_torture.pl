# 006_torture: test/e2e/torture against real servers — concurrent producers
# (some rolling back), subscribers that reconnect with their last id every
# few hundred events. torture checks that every committed broadcast reaches
# every subscriber exactly once, rolled-back ones never, in commit order.
#
# Run twice: with the default ring, and with the smallest ring and two
# workers, so that the ring overruns and the workers catch up from the table.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use PgbusNode;

my $e2e = "$FindBin::Bin/../e2e";
my $bin = $ENV{PGBUS_TORTURE} // "$e2e/torture";
if (!-x $bin && -f "$e2e/Makefile")
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'make', '-C', $e2e, 'torture' ], '>', \$out, '2>', \$err);
	note "building torture: $out$err";
}
# Without the client this test proves nothing: that is a failure, not a skip.
if (!-x $bin)
{
	fail("torture client $bin could not be built (make -C test/e2e torture)");
	done_testing();
	exit 1;
}

my $messages = $ENV{PGBUS_TORTURE_MESSAGES} // 6000;

sub torture_run
{
	my ($pg, $stream, $name, %opt) = @_;
	$pg->create_stream($stream);
	my ($out, $err) = ('', '');
	my @cmd = (
		$bin,
		'--conninfo' => $pg->connstr('postgres'),
		'--port' => $pg->http_port,
		'--stream' => $stream,
		'--producers' => $opt{producers} // 4,
		'--messages' => $opt{messages} // $messages,
		'--subscribers' => 4,
		'--rollback-pct' => 10,
		'--reconnect-every' => 300,
		'--timeout' => 90);
	note "running: @cmd";
	my $ok = eval { IPC::Run::run(\@cmd, '>', \$out, '2>', \$err, IPC::Run::timeout(240)) };
	my $why = $@;
	ok($ok, "$name: torture passes")
	  or diag("exit: " . ($? >> 8) . ($why ? " ($why)" : '') . "\nstdout: $out\nstderr: $err");
	note "$name: $out";
	note "$name stderr: $err" if $err ne '';
	like($out, qr/"committed":\d+/, "$name: summary printed");
	my ($committed) = $out =~ /"committed":(\d+)/;
	cmp_ok($committed // 0, '>', ($opt{messages} // $messages) / 2, "$name: most messages committed");
	return;
}

my $n1 = PgbusNode->new('torture');
# the issue's shape: 8 producers, 20 000 messages
torture_run($n1, 'torture', 'default ring', producers => 8, messages => $ENV{PGBUS_TORTURE_MESSAGES} // 20000);
$n1->finish;

my $n2 = PgbusNode->new('overrun',
	conf => "pgbus_stream.ring_size = 16\npgbus_stream.workers = 2\npgbus_stream.inline_payload_max = 0\n");
torture_run($n2, 'overrun', 'tiny ring, two workers');

# A transaction larger than half the ring never enters it: the workers catch
# up from the table, and a connected client still gets every row once.
{
	my $c = $n2->open_stream('overrun');
	my $before = $n2->safe_psql('postgres', 'SELECT sum(catch_ups) FROM pgbus_stream.workers()');
	$n2->safe_psql('postgres',
		q{SELECT pgbus_stream.broadcast('overrun', 'bulk ' || g) FROM generate_series(1, 2000) g});
	ok($c->wait_for_data_events(2000, 30), 'overrun: 2000 rows of one transaction arrive');
	$c->poll(0.5);
	my @d = map { $_->{data} } $c->data_events;
	is_deeply(\@d, [ map { "bulk $_" } 1 .. 2000 ], 'overrun: each once, in order');
	my $after = $n2->safe_psql('postgres', 'SELECT sum(catch_ups) FROM pgbus_stream.workers()');
	cmp_ok($after, '>', $before, "overrun: the workers caught up from the table ($before -> $after)");
	$c->close;
}
$n2->finish;

# kill -9 of the worker in the middle of the run: the postmaster restarts
# every process; producers reconnect (a transaction cut by the crash has an
# unknown outcome and may arrive at most once), subscribers reconnect with
# their last id, and every committed message still arrives exactly once.
my $n3 = PgbusNode->new('crash', conf => "restart_after_crash = on\n");
$n3->create_stream('crash');
{
	my ($out, $err) = ('', '');
	my @cmd = (
		$bin,
		'--conninfo' => $n3->connstr('postgres'),
		'--port' => $n3->http_port,
		'--stream' => 'crash',
		'--producers' => 4,
		'--messages' => 3 * $messages,
		'--subscribers' => 3,
		'--reconnect-every' => 500,
		'--crash-ok' => 1,
		'--timeout' => 90);
	my $h = IPC::Run::start(\@cmd, '>', \$out, '2>', \$err, IPC::Run::timeout(240));
	sleep 1.5;
	ok($h->pumpable, 'kill -9 mid-run: producers and subscribers are still running at the kill');
	my ($pid) = $n3->worker_pids;
	$n3->expect_kill($pid, 9);
	kill 'KILL', $pid;
	note "killed worker $pid mid-run";
	my $ok = eval { $h->finish };
	ok($ok, 'kill -9 mid-run: torture passes')
	  or diag("exit: " . ($? >> 8) . "\nstdout: $out\nstderr: $err");
	note "crash: $out";
	my ($committed) = $out =~ /"committed":(\d+)/;
	cmp_ok($committed // 0, '>', $messages / 2, 'kill -9 mid-run: most messages committed');
}
$n3->finish;

done_testing();
