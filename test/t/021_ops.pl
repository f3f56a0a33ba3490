# 021_ops: diagnostics() records the connection lifecycle in a bounded ring,
# and alerts() fires at its thresholds when a client stops reading.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use IO::Socket::INET;
use Socket qw(pack_sockaddr_in inet_aton SOL_SOCKET SO_RCVBUF);
use PostgreSQL::Test::Utils;
use Test::More;
use PgbusNode;

my $pg = PgbusNode->new('ops', conf => q{
pgbus_stream.diagnostics_size = 8
pgbus_stream.queue_max_events = 20
pgbus_stream.queue_max_bytes = 1048576
pgbus_stream.overflow_policy = drop_oldest
pgbus_stream.alert_overflow_dropped_total = 5
pgbus_stream.alert_queue_pressure_ratio = 0.5
});
$pg->create_stream('ops');

my $c = $pg->open_stream('ops');
is($pg->sse('/streams/nope')->status, 401, 'unknown stream: 401 (as a private one)');
my $diag = $pg->safe_psql('postgres', q{SELECT string_agg(event || ':' || stream, ' ' ORDER BY at) FROM pgbus_stream.diagnostics() WHERE event IN ('subscribed', 'rejected')});
like($diag, qr/subscribed:ops/, 'diagnostics: subscribed');
like($diag, qr/rejected:nope/, 'diagnostics: rejected');

# a client that never reads: its socket buffers fill, then its queue
# (a small receive buffer, set before connecting so the window stays small)
$c->close;
my $stalled = IO::Socket::INET->new(Proto => 'tcp') or die "socket: $!";
setsockopt($stalled, SOL_SOCKET, SO_RCVBUF, 4096) or die "setsockopt: $!";
$stalled->connect(pack_sockaddr_in($pg->http_port, inet_aton('127.0.0.1'))) or die "connect: $!";
print $stalled "GET /streams/ops HTTP/1.1\r\nHost: x\r\n\r\n";
sleep 0.5;
my $payload = 'x' x 3000;
# one transaction each (a burst in one transaction is paged, not dropped),
# so the kernel's socket buffers fill first and the queue stays full after
my $sql = join('', map { "SELECT pgbus_stream.broadcast('ops', '$payload$_');\n" } 1 .. 2500);
$pg->safe_psql('postgres', $sql);
my $deadline = time + 15;
my $alerts = '';
while (time < $deadline)
{
	$alerts = $pg->safe_psql('postgres', q{SELECT string_agg(code, ',' ORDER BY code) FROM pgbus_stream.alerts()});
	last if $alerts =~ /overflow_dropped_total/ && $alerts =~ /queue_pressure_ratio/;
	sleep 0.2;
}
like($alerts, qr/overflow_dropped_total/, 'alerts: overflow_dropped_total fires');
like($alerts, qr/queue_pressure_ratio/, 'alerts: queue_pressure_ratio fires for the stalled connection')
  or diag($pg->safe_psql('postgres', 'SELECT streams, queued_events, queued_bytes, state FROM pgbus_stream.connections()'));
my $row = $pg->safe_psql('postgres',
	q{SELECT severity || ' ' || value || ' ' || threshold FROM pgbus_stream.alerts() WHERE code = 'overflow_dropped_total'});
like($row, qr/^warning \d+ 5$/, "alerts: value and threshold ($row)");
cmp_ok($pg->safe_psql('postgres', q{SELECT overflow_dropped FROM pgbus_stream.stats() WHERE stream = 'ops'}),
	'>=', 5, 'stats(): overflow_dropped counted');
like($pg->safe_psql('postgres', q{SELECT string_agg(event, ' ') FROM pgbus_stream.diagnostics()}),
	qr/overflow/, 'diagnostics: overflow recorded');
close $stalled;

# the ring is bounded: older entries are counted, not kept
$pg->sse('/streams/nope') for 1 .. 12;
sleep 0.5;
is($pg->safe_psql('postgres', q{SELECT count(*) FROM pgbus_stream.diagnostics()}), 8, 'diagnostics: at most diagnostics_size rows');
cmp_ok($pg->safe_psql('postgres', q{SELECT max(evicted_before) FROM pgbus_stream.diagnostics()}), '>', 0,
	'diagnostics: evicted entries are counted');

# thresholds of 0 turn alerts off
$pg->safe_psql('postgres', q{ALTER SYSTEM SET pgbus_stream.alert_overflow_dropped_total = 0; SELECT pg_reload_conf();});
sleep 0.3;
is($pg->safe_psql('postgres', q{SELECT count(*) FROM pgbus_stream.alerts() WHERE code = 'overflow_dropped_total'}), 0,
	'alerts: threshold 0 disables');

$pg->finish;
done_testing();
