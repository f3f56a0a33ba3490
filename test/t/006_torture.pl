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
plan skip_all => "no torture binary ($bin); build it with make -C test/e2e" unless -x $bin;

my $messages = $ENV{PGBUS_TORTURE_MESSAGES} // 6000;

sub torture_run
{
	my ($pg, $stream, $name) = @_;
	$pg->create_stream($stream);
	my ($out, $err) = ('', '');
	my @cmd = (
		$bin,
		'--conninfo' => $pg->connstr('postgres'),
		'--port' => $pg->http_port,
		'--stream' => $stream,
		'--producers' => 4,
		'--messages' => $messages,
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
	cmp_ok($committed // 0, '>', $messages / 2, "$name: most messages committed");
	return;
}

my $n1 = PgbusNode->new('torture');
torture_run($n1, 'torture', 'default ring');
$n1->finish;

my $n2 = PgbusNode->new('overrun',
	conf => "pgbus_stream.ring_size = 16\npgbus_stream.workers = 2\npgbus_stream.inline_payload_max = 0\n");
torture_run($n2, 'overrun', 'tiny ring, two workers');
$n2->finish;

done_testing();
