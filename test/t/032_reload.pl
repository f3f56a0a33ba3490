# 032_reload: configuration reloads (SIGHUP through pg_reload_conf) reach the
# running worker without dropping open SSE connections.
#
#  - heartbeat_interval 1 s -> 3 s -> back to 1 s: the spacing of the heartbeat
#    comments on a connection opened before the first reload follows, and
#    that connection keeps receiving broadcasts throughout (same connection:
#    one pgbus:connected, never closed);
#  - overflow_policy drop_oldest -> disconnect: a client that stopped reading,
#    connected before the reload, is now disconnected on overflow (no gap
#    notice); back to drop_oldest: a new stalled client gets a gap notice;
#  - max_connections lowered: open connections stay, new ones get 503;
#  - idle_timeout switched on: a connection that only gets heartbeats is
#    closed (heartbeats are not activity), one that gets broadcasts is not;
#  - max_lifetime switched on: a stream older than the lifetime ends at once,
#    a new one ends after 1.8-2 s (lifetime less its jitter) with the
#    reason "lifetime" in diagnostics(); reconnecting with the last id it got
#    delivers every broadcast made in between exactly once;
#  - the worker process is the same from start to end.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

$SIG{PIPE} = 'IGNORE';

my $PAYLOAD = 65536;
my $pg = PgbusNode->new(
	'reload', conf => q{
pgbus_stream.queue_max_events = 16
pgbus_stream.queue_max_bytes = 262144
pgbus_stream.overflow_policy = drop_oldest
});
$pg->create_stream('r');
my ($pid0) = $pg->worker_pids;
ok($pid0, "worker pid $pid0");

sub reload
{
	my (%set) = @_;
	for my $k (sort keys %set)
	{
		if (defined $set{$k})
		{
			$pg->safe_psql('postgres', "ALTER SYSTEM SET pgbus_stream.$k = '$set{$k}'");
		}
		else
		{
			$pg->safe_psql('postgres', "ALTER SYSTEM RESET pgbus_stream.$k");
		}
	}
	$pg->safe_psql('postgres', 'SELECT pg_reload_conf()');
	return time;
}

# next_heartbeats waits for $n more heartbeat comments on $c and returns
# their arrival times (20 ms resolution).
sub next_heartbeats
{
	my ($c, $n, $timeout) = @_;
	my @t;
	my $seen = grep { /^heartbeat \d+$/ } $c->comments;
	my $deadline = time + $timeout;
	while (@t < $n && time < $deadline && !$c->closed)
	{
		$c->poll(0.02);
		my $now = grep { /^heartbeat \d+$/ } $c->comments;
		while ($seen < $now)
		{
			push @t, time;
			$seen++;
		}
	}
	return @t;
}

# new_connection_status opens connections to stream r (each closed again)
# until one gets status $want or 10 s pass; returns the last status.
sub new_connection_status
{
	my ($want) = @_;
	my $st = 0;
	my $deadline = time + 10;
	while (time < $deadline)
	{
		my $c = eval { $pg->sse('/streams/r', timeout => 5) };
		$st = $c ? $c->status : 0;
		$c->close if $c;
		last if $st == $want;
		sleep 0.2;
	}
	return $st;
}

sub gaps_of { my @t = @_; return map { $t[$_] - $t[ $_ - 1 ] } 1 .. $#t }

sub fmt { return join(', ', map { sprintf('%.2f', $_) } @_) }

# One psql session fed a statement at a time (a psql process per broadcast
# would take most of this test's time).
my %psql = (in => '', out => '', err => '', n => 0, timer => IPC::Run::timeout(60));
$psql{h} = IPC::Run::start([ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $pg->connstr('postgres') ],
	'<', \$psql{in}, '>', \$psql{out}, '2>', \$psql{err}, $psql{timer});

sub session_query
{
	my ($sql) = @_;
	my $mark = 'pgbus-done-' . ++$psql{n};
	$psql{out} = '';
	$psql{in} .= "$sql;\n\\echo $mark\n";
	$psql{timer}->start(30);
	$psql{h}->pump while $psql{out} !~ /^\Q$mark\E$/m;
	die "psql: $psql{err}" if $psql{err} =~ /ERROR/;
	return $psql{out} =~ s/^\Q$mark\E\n//mr =~ s/\n$//r;
}

my $sent = 0;    # broadcasts so far (data "r<i>")

# send_paced commits broadcasts of 64 KiB one by one, each read by $reader
# before the next, $n of them or (with $until) until $until->() is true,
# at most 400. Returns true if $reader got every one (and $until held).
sub send_paced
{
	my ($reader, $n, $until) = @_;
	my $ok = 1;
	for my $k (1 .. ($until ? 400 : $n))
	{
		$sent++;
		session_query("SELECT pgbus_stream.broadcast('r', 'r$sent:' || repeat('x', $PAYLOAD))");
		$ok &&= $reader->wait_until(sub { grep { ($_->{data} // '') =~ /^r$sent:/ } $_[0]->data_events }, 10);
		return $ok if !$ok || ($until && $k >= $n && $until->());
	}
	return $ok && (!$until || $until->());
}

sub connected_frames { return scalar grep { ($_->{event} // '') eq 'pgbus:connected' } $_[0]->events }

# ---------------------------------------------------------------- heartbeat
my $a = $pg->open_stream('r');
is($a->status, 200, 'client A connected');
my @hb = next_heartbeats($a, 3, 6);
is(scalar @hb, 3, 'three heartbeats at heartbeat_interval = 1 s');
my @g = gaps_of(@hb);
ok(!grep({ $_ < 0.7 || $_ > 1.5 } @g), 'spaced about 1 s: ' . fmt(@g));

my $t_reload = reload(heartbeat_interval => 3);
@hb = next_heartbeats($a, 3, 12);
is(scalar @hb, 3, 'three heartbeats after the reload to 3 s');
@g = gaps_of(@hb);
ok(@hb && $hb[0] - $t_reload > 1.5, sprintf('first heartbeat after the reload comes %.2f s later', ($hb[0] // 0) - $t_reload));
ok(@g == 2 && !grep({ $_ < 2.6 || $_ > 3.6 } @g), 'spaced about 3 s: ' . fmt(@g));
ok(!$a->closed, 'client A still connected after the reload');
is(connected_frames($a), 1, 'same connection (one pgbus:connected)');
ok(send_paced($a, 3), 'client A receives broadcasts after the reload');

# ---------------------------------------------------------------- overflow_policy
# S stops reading right after its response head; A keeps reading.
my $s = $pg->sse('/streams/r');
is($s->status, 200, 'stalled client S connected (drop_oldest)');
reload(overflow_policy => 'disconnect');
sleep 0.5;
# The kernel buffers of S (mostly the server's send buffer, up to tcp_wmem's
# maximum) fill first; then its queue (256 kB) overflows.
# S cannot be read to see when it is closed (reading would unstall it):
# connections() tells.
my $s_port = $s->{sock}->sockport;
ok(send_paced($a, 20, sub {
	session_query("SELECT count(*) FROM pgbus_stream.connections() WHERE remote_addr LIKE '%:$s_port'") == 0 }),
	"A receives every broadcast of 64 KiB until the server closes S ($sent sent)");
ok($s->wait_closed(5), 'S, connected before the reload, is disconnected on overflow');
ok(!grep({ ($_->{event} // '') eq 'pgbus:gap-detected' } $s->events), 'S got no gap notice (disconnect policy)');
$s->close;
ok(!$a->closed, 'A is still connected');
is(connected_frames($a), 1, 'A: still one pgbus:connected');

reload(overflow_policy => undef);    # back to the configured drop_oldest
sleep 0.5;
my $s2 = $pg->sse('/streams/r');
is($s2->status, 200, 'stalled client S2 connected (drop_oldest again)');
my $before = $sent;
# S2 cannot be read to see when it overflows: the worker's counter tells.
my $dropped0 = $pg->safe_psql('postgres', 'SELECT sum(overflow_dropped) FROM pgbus_stream.workers()');
ok(send_paced($a, 20, sub {
	session_query('SELECT sum(overflow_dropped) FROM pgbus_stream.workers()') > $dropped0 + 5 }),
	'A receives every broadcast while S2 is stalled, until S2 overflows (' . ($sent - $before) . ' sent)');
ok($s2->wait_until(sub { grep { ($_->{event} // '') eq 'pgbus:gap-detected' } $_[0]->events }, 15),
	'S2, reading again, gets pgbus:gap-detected');
ok(!$s2->closed, 'S2 stays connected');
$s2->close;

# ---------------------------------------------------------------- heartbeat back to 1 s
$t_reload = reload(heartbeat_interval => undef);
@hb = next_heartbeats($a, 3, 8);
@g = gaps_of(@hb);
ok(@g == 2 && !grep({ $_ < 0.7 || $_ > 1.5 } @g), 'heartbeat_interval reset: spaced about 1 s again: ' . fmt(@g));
ok(!$a->closed, 'A is still connected');
is(connected_frames($a), 1, 'A: still one pgbus:connected');
my @data = map { $_->{data} =~ /^r(\d+):/ ? $1 : -1 } $a->data_events;
is_deeply(\@data, [ 1 .. $sent ], "A got all $sent broadcasts, in order, once each, across four reloads");

# ---------------------------------------------------------------- max_connections
my $b = $pg->open_stream('r');
is($b->status, 200, 'client B connected');
reload(max_connections => 2);
my $st = new_connection_status(503);
is($st, 503, 'max_connections lowered to 2: a third connection gets 503');
ok(!$a->closed && !$b->closed, 'A and B stay connected');
ok(send_paced($a, 1) && $b->wait_for_data_events(1, 5), 'and both receive');
reload(max_connections => undef);
$st = new_connection_status(200);
is($st, 200, 'max_connections reset: a third connection gets in again');

# ---------------------------------------------------------------- idle_timeout
# B gets a broadcast every ~0.5 s; Q, on a stream nobody broadcasts to, only
# heartbeats (every 1 s).
$a->close;
$pg->create_stream('quiet');
my $q = $pg->open_stream('quiet');
is($q->status, 200, 'client Q on a quiet stream');
# B's last frame must be recent when the setting takes effect (else B, idle
# for longer than 2 s on a slow machine, is closed at once, rightly): the
# setting is written first, B gets a broadcast, then the reload.
$pg->safe_psql('postgres', "ALTER SYSTEM SET pgbus_stream.idle_timeout = '2'");
$sent++;
session_query("SELECT pgbus_stream.broadcast('r', 'r$sent: before the reload')");
ok($b->wait_until(sub { grep { ($_->{data} // '') =~ /before the reload/ } $_[0]->data_events }, 10),
	'B receives a broadcast right before the reload');
$pg->safe_psql('postgres', 'SELECT pg_reload_conf()');
my $t_idle = time;
my $q_closed;
my $b_got = 0;
my $deadline = time + 7;
while (time < $deadline)
{
	$sent++;
	session_query("SELECT pgbus_stream.broadcast('r', 'r$sent: keep-alive')");
	$b->poll(0.2);
	$q->poll(0.2);
	$q_closed //= time if $q->closed;
}
$b_got = grep { ($_->{data} // '') =~ /keep-alive/ } $b->data_events;
ok($q_closed, sprintf('Q, getting only heartbeats, is closed after idle_timeout = 2 s is set (%.1f s after the reload)',
	($q_closed // 0) - $t_idle));
ok(defined $q_closed && $q_closed - $t_idle <= 4.5, 'within 4.5 s of the reload');
ok((grep { /^heartbeat/ } $q->comments) >= 1, 'Q did get heartbeats before');
ok(!$b->closed, "B, receiving broadcasts ($b_got), is not closed");
reload(idle_timeout => undef);

# ---------------------------------------------------------------- max_lifetime
my $t_life = reload(max_lifetime => 2);
ok($b->wait_closed(4), 'B, open for longer than the new max_lifetime = 2 s, is ended after the reload');
my $l = $pg->open_stream('r');
my $t_open = time;
is($l->status, 200, 'client L connects');
my @want;    # broadcasts made after L connected
my $l_closed;
$deadline = time + 6;
while (time < $deadline && !$l_closed)
{
	$sent++;
	session_query("SELECT pgbus_stream.broadcast('r', 'r$sent: life')");
	push @want, "r$sent: life";
	$l->poll(0.1);
	$l_closed = time if $l->closed;
}
ok($l_closed, sprintf('L ends by itself %.2f s after it connected', ($l_closed // 0) - $t_open));
ok(defined $l_closed && $l_closed - $t_open >= 1.7 && $l_closed - $t_open <= 3.0,
	'after max_lifetime less at most 10 % jitter (plus polling slack)');
my @got = map { $_->{data} } grep { ($_->{data} // '') =~ /: life$/ } $l->data_events;
my $last_id = (grep { ($_->{data} // '') =~ /: life$/ } $l->data_events)[-1]{id};
ok(defined $last_id, 'L got broadcasts before it ended (' . scalar(@got) . ')');
for (1 .. 3)
{
	$sent++;
	session_query("SELECT pgbus_stream.broadcast('r', 'r$sent: life')");
	push @want, "r$sent: life";
}
my $l2 = $pg->open_stream('r', headers => { 'Last-Event-ID' => $last_id });
$l2->wait_until(sub { (grep { ($_->{data} // '') eq $want[-1] } $l2->data_events) }, 10);
push @got, map { $_->{data} } grep { ($_->{data} // '') =~ /: life$/ } $l2->data_events;
is_deeply(\@got, \@want, 'reconnecting with the last id: every broadcast since L connected, once, in order (' . scalar(@want) . ')');
like($pg->safe_psql('postgres', q{SELECT string_agg(detail, ' ') FROM pgbus_stream.diagnostics() WHERE event = 'closed'}),
	qr/lifetime/, 'diagnostics() records the reason "lifetime"');
reload(max_lifetime => undef);
$l2->close;

is_deeply([ $pg->worker_pids ], [$pid0], 'the same worker process throughout');
$psql{in} .= "\\q\n";
$psql{h}->finish;
$_->close for $q;
$pg->finish;
done_testing();
