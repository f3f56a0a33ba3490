# 070_standby: a streaming hot standby serves SSE for what the primary
# commits, with the primary's guarantees and the same cursors.
#
# A. Subscribers on the primary and on the standby get every broadcast
#    (durable and ephemeral) exactly once, in order; the standby's cursors
#    carry the primary's epoch.
# B. Out-of-order commits: A draws an id, B a later one and commits first.
#    The standby delivers both once, in the primary's commit order, and its
#    horizon stays below A's id while A is open. A rolled-back insert's
#    floor is swept and the horizon moves past it.
# C. One cursor, any node: a client leaves the primary mid-stream and
#    reconnects to the standby with its Last-Event-ID (also before the
#    standby has replayed what it missed), then back to the primary.
# D. Catalog changes replicate: a stream created on the primary is served by
#    the standby within a second or so, a dropped one is no longer served.
# E. replication() on the standby; an isolated broadcast's latency on each
#    node and the idle standby worker's CPU over 5 s (figures, not
#    assertions).
# F. Four producers at once, transactions of 1-3 rows, some rolled back:
#    both nodes deliver every committed row once, each producer's in its
#    commit order, none rolled back. (Transactions committing at the same
#    moment may come in another order on the standby: the order of their
#    WAL records, which is a commit order too.)
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode qw(parse_token token_covers frames_ok ids_ok);

my $p = PgbusNode->new('primary', allows_streaming => 1);
my $epoch = $p->create_stream('chat');
my $s = PgbusNode->standby('standby', $p);
ok(1, 'the standby accepts SSE connections');
$p->wait_for_catchup($s->node, 'replay');
ok(defined $s->wait_stream_served('chat'), 'the standby serves a stream created on the primary');

sub data_of { return map { $_->{data} } @_ }

# Polls $sql on the standby until it returns $want (string compare).
sub standby_until
{
	my ($sql, $want, $timeout) = @_;
	my $deadline = time + ($timeout // 10);
	my $got;
	while (time < $deadline)
	{
		$got = $s->safe_psql('postgres', $sql);
		return 1 if $got eq $want;
		sleep 0.05;
	}
	diag("standby: $sql returned '$got', not '$want'");
	return 0;
}

sub standby_horizon
{
	return $s->safe_psql('postgres',
		q{SELECT coalesce(max(horizon), 0) FROM pgbus_stream.stats() WHERE stream = 'chat'});
}

# ---------------------------------------------------------------- A
my $cp = $p->open_stream('chat');
my $cs = $s->open_stream('chat');
is($cp->status, 200, 'A: subscriber on the primary');
is($cs->status, 200, 'A: subscriber on the standby');
my @sent;
push @sent, [ $p->broadcast('chat', "m$_"), "m$_" ] for 1 .. 19;
# An ephemeral broadcast has no row: it reaches the standby through WAL only.
push @sent,
  [ $p->safe_psql('postgres', q{SELECT pgbus_stream.broadcast('chat', 'm20', durable => false)}), 'm20' ];
ok($cp->wait_for_data_events(20, 20), 'A: the primary subscriber got 20');
ok($cs->wait_for_data_events(20, 20), 'A: the standby subscriber got 20 (the last one ephemeral)');
frames_ok([ $cp->data_events ], \@sent, undef, 'A primary');
frames_ok([ $cs->data_events ], \@sent, undef, 'A standby');
is(parse_token(($cs->data_events)[-1]{id})->{epoch}, $epoch,
	"A: the standby's cursors carry the stream's catalog id ($epoch) as epoch");

# ---------------------------------------------------------------- B
my $ta = $p->background_psql('postgres');
my $tb = $p->background_psql('postgres');
$ta->query_safe('BEGIN');
my $ida = $ta->query_safe(q{SELECT pgbus_stream.broadcast('chat', 'ooo-a')});
$tb->query_safe('BEGIN');
my $idb = $tb->query_safe(q{SELECT pgbus_stream.broadcast('chat', 'ooo-b')});
cmp_ok($idb, '>', $ida, "B: B drew $idb after A's $ida");
$tb->query_safe('COMMIT');
ok($cs->wait_for_data_events(21, 10), 'B: the standby delivers B while A is open');
is(($cs->data_events)[-1]{data}, 'ooo-b', 'B: that frame is B');
ok(!token_covers(($cs->data_events)[-1]{id}, $ida), "B: its cursor does not cover A's id");
$p->wait_for_catchup($s->node, 'replay');
sleep 0.3;    # a few worker rounds on the standby
cmp_ok(standby_horizon(), '<', $ida, "B: the standby's horizon stays below A's id while A is open");
cmp_ok($s->safe_psql('postgres', 'SELECT standby_floors FROM pgbus_stream.replication()'),
	'>=', 1, "B: the standby holds A's floor");

# A rolled-back insert in between: its floor must not hold the horizon.
my $tr = $p->background_psql('postgres');
$tr->query_safe('BEGIN');
my $idr = $tr->query_safe(q{SELECT pgbus_stream.broadcast('chat', 'rolled-back')});
$tr->query_safe('ROLLBACK');
$tr->quit;
$ta->query_safe('COMMIT');
$ta->quit;
$tb->quit;
ok($cs->wait_for_data_events(22, 10), 'B: the standby delivers A after its commit');
ok($cp->wait_for_data_events(22, 10), 'B: so does the primary');
is_deeply([ data_of(($cs->data_events)[ 20, 21 ]) ], [ 'ooo-b', 'ooo-a' ],
	"B: the standby delivers in the primary's commit order");
is_deeply([ data_of(($cp->data_events)[ 20, 21 ]) ], [ 'ooo-b', 'ooo-a' ],
	'B: as the primary does');
my $after = $p->broadcast('chat', 'after');
push @sent, [ $idb, 'ooo-b' ], [ $ida, 'ooo-a' ], [ $after, 'after' ];
ok($cs->wait_for_data_events(23, 10), 'B: the standby delivers the next broadcast');
frames_ok([ $cs->data_events ], \@sent, undef, 'B standby');
ok(standby_until('SELECT standby_floors FROM pgbus_stream.replication()', '0'),
	'B: no floor left on the standby (the rolled-back one was swept)');
cmp_ok($s->safe_psql('postgres', 'SELECT floors_swept FROM pgbus_stream.replication()'),
	'>=', 1, 'B: replication() counts the swept floor');
my $deadline = time + 10;
sleep 0.1 while standby_horizon() < $after && time < $deadline;
cmp_ok(standby_horizon(), '>=', $after,
	"B: the standby's horizon passes the rolled-back id $idr and reaches $after");
$cp->close;
$cs->close;

# ---------------------------------------------------------------- C
my $c1 = $p->open_stream('chat');
my $base = scalar @sent;
push @sent, [ $p->broadcast('chat', "c$_"), "c$_" ] for 1 .. 3;
ok($c1->wait_for_data_events(3, 10), 'C: a client on the primary got 3');
my $last = ($c1->data_events)[-1]{id};
$c1->close;
push @sent, [ $p->broadcast('chat', "c$_"), "c$_" ] for 4 .. 6;    # while it is away
$p->wait_for_catchup($s->node, 'replay');
my $c2 = $s->open_stream('chat', headers => { 'Last-Event-ID' => $last });
is($c2->status, 200, "C: the standby accepts the primary's cursor");
push @sent, [ $p->broadcast('chat', "c$_"), "c$_" ] for 7 .. 8;
ok($c2->wait_for_data_events(5, 10), 'C: the client got 5 on the standby');
frames_ok([ $c2->data_events ], [ @sent[ $base + 3 .. $base + 7 ] ], $last,
	'C primary -> standby: exactly what it missed, then live');
my $last2 = ($c2->data_events)[-1]{id};
$c2->close;
push @sent, [ $p->broadcast('chat', "c$_"), "c$_" ] for 9 .. 10;
my $c3 = $p->open_stream('chat', headers => { 'Last-Event-ID' => $last2 });
ok($c3->wait_for_data_events(2, 10), "C: back on the primary with the standby's cursor");
frames_ok([ $c3->data_events ], [ @sent[ $base + 8 .. $base + 9 ] ], $last2,
	'C standby -> primary: exactly what it missed');
my $last3 = ($c3->data_events)[-1]{id};
$c3->close;

# Straight to the standby, before it has necessarily replayed the last commit.
my $fresh = $p->broadcast('chat', 'c11');
push @sent, [ $fresh, 'c11' ];
my $c4 = $s->open_stream('chat', headers => { 'Last-Event-ID' => $last3 });
ok($c4->wait_for_data_events(1, 10), 'C: the standby catches up with a cursor it may be behind');
frames_ok([ $c4->data_events ], [ $sent[-1] ], $last3, 'C: nothing missed, nothing twice');
$c4->poll(0.5);
is(scalar($c4->data_events), 1, 'C: and nothing more');
$c4->close;

# ---------------------------------------------------------------- D
my $t0 = time;
my $news = $p->create_stream('news');
ok(defined $s->wait_stream_served('news', 10), 'D: the standby serves a stream created on the primary');
my $took = time - $t0;
note(sprintf('D: create_stream on the primary -> served by the standby in %.2f s', $took));
cmp_ok($took, '<', 5, 'D: within seconds');
my $cn = $s->open_stream('news');
my $nid = $p->broadcast('news', 'n1');
ok($cn->wait_for_data_events(1, 10), "D: the new stream's broadcast reaches the standby");
frames_ok([ $cn->data_events ], [ [ $nid, 'n1' ] ], undef, 'D news');
$cn->close;
$p->safe_psql('postgres', q{SELECT pgbus_stream.drop_stream('news')});
my $gone = $p->sse('/streams/news', timeout => 5);
my $want = $gone->status;
$gone->close;
isnt($want, 200, "D: the primary refuses the dropped stream ($want)");
$p->wait_for_catchup($s->node, 'replay');
$deadline = time + 5;
my $st = 0;
while (time < $deadline)
{
	my $c = $s->sse('/streams/news', timeout => 5);
	$st = $c->status;
	$c->close;
	last if $st == $want;
	sleep 0.1;
}
is($st, $want, 'D: a stream dropped on the primary is no longer served by the standby');

# ---------------------------------------------------------------- E
my $r = $s->safe_psql('postgres',
	q{SELECT in_recovery, replayed_lsn IS NOT NULL, replay_lag_bytes >= 0,
	         last_replayed_commit IS NOT NULL FROM pgbus_stream.replication()});
is($r, 't|t|t|t', 'E: replication() on the standby shows replay position, lag and last commit');
is($p->safe_psql('postgres', 'SELECT in_recovery, replayed_lsn IS NULL FROM pgbus_stream.replication()'),
	'f|t', 'E: and on the primary, not in recovery');

# stats() carries the replay lag on a standby: replay paused while the
# primary broadcasts, the standby has WAL it has not replayed; resumed, the
# lag goes back to 0. On the primary the columns are NULL.
is($p->safe_psql('postgres',
		q{SELECT bool_and(replay_lag_bytes IS NULL AND replay_lag_ms IS NULL) FROM pgbus_stream.stats()}),
	't', 'E: stats() on the primary: no replay lag');
$s->safe_psql('postgres', 'SELECT pg_wal_replay_pause()');
ok(standby_until('SELECT pg_get_wal_replay_pause_state()', 'paused'), 'E: standby replay paused');
$p->broadcast('chat', 'while replay is paused');
ok( standby_until(
		q{SELECT replay_lag_bytes > 0 AND replay_lag_ms > 0 FROM pgbus_stream.stats() WHERE stream = 'chat'},
		't'),
	'E: stats() on the standby shows the WAL received and not replayed, and for how long');
$s->safe_psql('postgres', 'SELECT pg_wal_replay_resume()');
$p->wait_for_catchup($s->node, 'replay');
ok(standby_until(q{SELECT replay_lag_bytes, replay_lag_ms FROM pgbus_stream.stats() WHERE stream = 'chat'},
		'0|0'),
	'E: replay resumed: stats() shows no lag');

# An isolated broadcast on an idle primary: how long until a client of each
# node has it (the broadcast's own psql run included; a figure, not an
# assertion). Were the COMMIT record left for the WAL writer's next round,
# the standby would trail by up to wal_writer_delay (200 ms).
my (@lat_p, @lat_s);
for my $i (1 .. 5)
{
	for my $pair ([ $p, \@lat_p ], [ $s, \@lat_s ])
	{
		my ($node, $into) = @$pair;
		my $c = $node->open_stream('chat');
		sleep 0.3;
		my $t0 = time;
		$p->broadcast('chat', "idle$i");
		$c->wait_for_data_events(1, 10);
		push @$into, time - $t0;
		$c->close;
	}
}
my $median = sub { my @v = sort { $a <=> $b } @_; return $v[ int(@v / 2) ] };
note(sprintf('E: isolated broadcast on an idle primary -> frame: primary client %.1f ms, '
	  . 'standby client %.1f ms (medians of 5)', 1000 * $median->(@lat_p), 1000 * $median->(@lat_s)));

my ($wpid) = $s->worker_pids;
sub cpu_ticks
{
	my $stat = slurp_file("/proc/$wpid/stat");
	$stat =~ s/^.*\)\s+//;
	my @f = split /\s+/, $stat;
	return $f[11] + $f[12];    # utime + stime (fields 14 and 15)
}
my $idle = $s->open_stream('chat');    # an idle subscriber, heartbeats every second
sleep 1;
my ($c0, $w0) = (cpu_ticks(), time);
sleep 5;
my ($c5, $w5) = (cpu_ticks(), time);
my $hz = `getconf CLK_TCK` + 0 || 100;
note(sprintf('E: idle standby worker CPU over %.1f s with one subscriber: %.2f %% of a core',
		$w5 - $w0, 100 * ($c5 - $c0) / $hz / ($w5 - $w0)));
$idle->close;

# ---------------------------------------------------------------- F
my $fp = $p->open_stream('chat');
my $fs = $s->open_stream('chat');
my $dir = PostgreSQL::Test::Utils::tempdir();
my (@h, @out, @err, @want, %rolled);
srand(70);
for my $prod (1 .. 4)
{
	my $file = "$dir/producer$prod.sql";
	open my $fh, '>', $file or die "$file: $!";
	my $i = 0;
	for my $t (1 .. 40)
	{
		my $rows = 1 + int(rand(3));
		my $commit = rand() >= 0.1;
		print $fh "BEGIN;\n";
		for (1 .. $rows)
		{
			$i++;
			print $fh "SELECT pgbus_stream.broadcast('chat', 'f$prod-$i');\n";
			if ($commit) { push @want, "f$prod-$i" }
			else         { $rolled{"f$prod-$i"} = 1 }
		}
		print $fh($commit ? "COMMIT;\n" : "ROLLBACK;\n");
	}
	close $fh;
}
for my $prod (1 .. 4)
{
	push @h,
	  IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $p->connstr('postgres'), '-f', "$dir/producer$prod.sql" ],
		'>', \$out[$prod], '2>', \$err[$prod], IPC::Run::timeout(120));
}
for my $prod (1 .. 4)
{
	my $ok = eval { $h[ $prod - 1 ]->finish };
	ok($ok, "F: producer $prod finished") or diag($@ // '', $err[$prod] // '');
}
my $n = scalar @want;
for my $pair ([ 'primary', $fp ], [ 'standby', $fs ])
{
	my ($name, $c) = @$pair;
	ok($c->wait_for_data_events($n, 30), "F $name: $n committed rows arrive");
	$c->poll(0.5);
	my @got = map { $_->{data} } $c->data_events;
	my %count;
	$count{$_}++ for @got;
	is(scalar @got, $n, "F $name: exactly $n frames");
	is_deeply([ grep { $count{$_} != 1 } @want ], [], "F $name: each committed row once");
	is_deeply([ grep { $rolled{$_} } @got ], [], "F $name: no rolled-back row");
	my (%last, @disorder);
	for my $d (@got)
	{
		my ($prod, $i) = $d =~ /^f(\d)-(\d+)$/ or next;
		push @disorder, $d if defined $last{$prod} && $i <= $last{$prod};
		$last{$prod} = $i;
	}
	is_deeply(\@disorder, [], "F $name: each producer's rows in its commit order");
	my %ids = map { split /\|/, $_, 2 } split /\n/,
	  $p->safe_psql('postgres', q{SELECT message->>'html', msg_id FROM pgbus_stream.q_pgbus_chat});
	ids_ok([ $c->data_events ], [ map { $ids{ $_->{data} } } $c->data_events ], undef, "F $name");
}
$fp->close;
$fs->close;

$s->finish;
$p->finish;
done_testing();
