# 066_presence: who is connected to a stream, over two workers.
# presence(stream) counts the live connections of every worker by identity
# (the JWT's sub; anonymous ones in one NULL row); a ?presence=1 connection
# gets one snapshot frame, then pgbus:presence join/leave frames (no id:
# line) when an identity's count changes on any worker: on connect, on
# disconnect and when the other worker is stopped. Privileges (private
# streams: pgbus_stream_monitor or the owner; ?presence=1 needs a
# credential that covers the stream, also a public one) and bad input.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

my $pg = PgbusNode->new('presence',
	conf => "pgbus_stream.workers = 2\npgbus_stream.jwt_secret = 'presence-secret'\n");
$pg->wait_workers(2) or BAIL_OUT('two workers did not start');
$pg->create_stream('room', public => 0);
$pg->create_stream('lobby');

sub token
{
	my ($sub, @streams) = @_;
	@streams = ('room') unless @streams;
	my $arr = 'ARRAY[' . join(',', map { PgbusNode::sql_literal($_) } @streams) . ']';
	return $pg->safe_psql('postgres',
		"SELECT pgbus_stream.sign_token($arr, '1 hour', " . PgbusNode::sql_literal($sub) . ')');
}
my %tok = map { $_ => token($_) } qw(alice bob carol watcher);
$tok{anon} = token(undef);

# The worker serving a connection: the top byte of its connection id.
sub worker_of
{
	my ($c) = @_;
	my ($f) = grep { ($_->{event} // '') eq 'pgbus:connected' } $c->events;
	return undef unless $f && $f->{data} =~ /"connectionId":"([0-9a-f]{2})/;
	return hex $1;
}

sub connect_as
{
	my ($who, $query) = @_;
	my $c = $pg->sse('/streams/room' . (defined $query ? "?$query" : ''),
		headers => { Authorization => "Bearer $tok{$who}" });
	is($c->status, 200, "$who connects") or return $c;
	$c->wait_for_events(1, 10);
	return $c;
}

# presence() as "sub=count" pairs, anonymous as "-".
sub presence_sql
{
	my ($stream) = @_;
	my $out = $pg->safe_psql('postgres',
		"SELECT coalesce(sub, '-') || '=' || connections FROM pgbus_stream.presence('$stream')");
	return join(' ', split /\n/, $out);
}

sub wait_presence
{
	my ($stream, $want, $what) = @_;
	my $deadline = time + 10;
	my $got;
	while (time < $deadline)
	{
		$got = presence_sql($stream);
		last if $got eq $want;
		sleep 0.1;
	}
	is($got, $want, $what);
}

sub presence_frames
{
	my ($c) = @_;
	return map { decode_json($_->{data}) }
	  grep { ($_->{event} // '') eq 'pgbus:presence' } $c->take_events;
}

# Waits for the next presence frame matching $match (a hash of fields).
my %pending;
sub next_presence
{
	my ($c, $match, $what) = @_;
	my $found;
	$c->wait_until(
		sub {
			push @{ $pending{$c} }, presence_frames($c);
			while (my $f = shift @{ $pending{$c} })
			{
				my $ok = 1;
				for my $k (keys %$match)
				{
					my $v = $f->{$k};
					$ok = 0 unless defined $v ? defined $match->{$k} && $v eq $match->{$k} : !defined $match->{$k};
				}
				if ($ok) { $found = $f; return 1 }
				note('presence frame passed over: ' . encode_json($f));
			}
			return 0;
		},
		10);
	ok($found, $what) or diag('no frame ' . encode_json($match));
	return $found;
}

# ---- presence() over both workers --------------------------------------------------------
my (@alice, %alice_on);
for my $n (1 .. 24)
{
	my $c = connect_as('alice');
	push @alice, $c;
	$alice_on{ worker_of($c) }++;
	last if @alice >= 4 && keys(%alice_on) == 2;
}
is(scalar(keys %alice_on), 2, 'alice has connections on both workers')
  or BAIL_OUT('SO_REUSEPORT put every connection on one worker');
my $bob = connect_as('bob');
my $anon = connect_as('anon');
my $nalice = @alice;
wait_presence('room', "-=1 alice=$nalice bob=1", 'presence() counts every worker\'s connections by sub, anonymous as NULL');
is($pg->safe_psql('postgres', 'SELECT count(DISTINCT worker) FROM pgbus_stream.connections()'),
	'2', 'the connections are on two workers');
is(presence_sql('lobby'), '', 'a stream without connections has no presence');

# ---- ?presence=1: a snapshot, then joins and leaves from both workers ---------------------
my $watch = connect_as('watcher', 'presence=1');
my $wworker = worker_of($watch);
my $snap = next_presence($watch, { action => 'snapshot' }, 'a presence connection gets a snapshot');
is_deeply(
	$snap->{members},
	[ { sub => undef, count => 1 }, { sub => 'alice', count => $nalice }, { sub => 'bob', count => 1 },
		{ sub => 'watcher', count => 1 } ],
	'the snapshot lists every identity with its count, itself included');
is($snap->{stream}, 'room', 'the snapshot names the stream');
my ($raw) = grep { ($_->{event} // '') eq 'pgbus:presence' } $watch->events;
ok(!defined $raw->{id}, 'presence frames carry no id: line (ephemeral)');

# carol joins, on this worker and then on the other one
my (@carol, $remote_carol);
for my $n (1 .. 24)
{
	my $c = connect_as('carol');
	push @carol, $c;
	next_presence($watch, { action => 'join', sub => 'carol', count => scalar @carol },
		"join: carol's connection " . scalar(@carol) . ' (worker ' . worker_of($c) . ')');
	if (worker_of($c) != $wworker) { $remote_carol = $c; last }
}
ok($remote_carol, 'a join from the other worker reached the presence connection');
wait_presence('room', "-=1 alice=$nalice bob=1 carol=" . scalar(@carol) . ' watcher=1',
	'presence() after the joins');

# leave on disconnect (the other worker's connection first)
$remote_carol->close;
@carol = grep { $_ != $remote_carol } @carol;
next_presence($watch, { action => 'leave', sub => 'carol', count => scalar @carol },
	'leave: carol\'s connection on the other worker closed');
if (@carol)
{
	$_->close for @carol;
	next_presence($watch, { action => 'leave', sub => 'carol', count => 0 }, 'leave: carol is gone (count 0)');
}
$bob->close;
next_presence($watch, { action => 'leave', sub => 'bob', count => 0 }, 'leave: bob closed');

# a second presence connection on a public stream, anonymous reader joins
my $lobby_watch = $pg->sse('/streams/lobby?presence=1',
	headers => { Authorization => 'Bearer ' . token('watcher', 'lobby') });
is($lobby_watch->status, 200, '?presence=1 on a public stream with a credential that covers it');
next_presence($lobby_watch, { action => 'snapshot' }, 'lobby snapshot');
my $lobby_anon = $pg->sse('/streams/lobby');
is($lobby_anon->status, 200, 'an anonymous reader of the public stream');
next_presence($lobby_watch, { action => 'join', sub => undef, count => 1 },
	'join of an anonymous connection: sub null');
$lobby_anon->close;
next_presence($lobby_watch, { action => 'leave', sub => undef, count => 0 }, 'and its leave');

# ---- leave when the other worker stops -----------------------------------------------------
my $other = 1 - $wworker;
my $on_other = $alice_on{$other};
my $remaining = $nalice - $on_other;
my $pid = $pg->safe_psql('postgres', "SELECT pid FROM pgbus_stream.workers() WHERE worker = $other");
$pg->expect_exit($pid, 1);
$pg->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
next_presence($watch, { action => 'leave', sub => 'alice', count => $remaining },
	"leave: the other worker stopped, alice keeps the $remaining connection(s) of this worker");
my $after_stop = (worker_of($anon) == $other ? '' : '-=1 ') . "alice=$remaining watcher=1";
wait_presence('room', $after_stop, 'presence() after the other worker stopped');
$pg->wait_workers(2, exclude => [$pid]) or fail('the stopped worker came back');

# ---- privileges ----------------------------------------------------------------------------
$pg->safe_psql(
	'postgres', q{
CREATE ROLE plain LOGIN;
CREATE ROLE mon LOGIN IN ROLE pgbus_stream_monitor;
GRANT USAGE ON SCHEMA pgbus_stream TO plain;
});
my ($rc, $out, $err) = $pg->psql('postgres', "SET ROLE plain; SELECT * FROM pgbus_stream.presence('room')");
isnt($rc, 0, 'a role outside pgbus_stream_monitor cannot list a private stream\'s presence');
like($err, qr/permission denied for the presence of private stream "room"/, '... with a clear error');
($rc, $out, $err) = $pg->psql('postgres', "SET ROLE plain; SELECT count(*) FROM pgbus_stream.presence('lobby')");
is($rc, 0, 'any role may list a public stream\'s presence') or diag($err);
($rc, $out, $err) = $pg->psql('postgres', "SET ROLE mon; SELECT sub FROM pgbus_stream.presence('room') WHERE sub = 'watcher'");
is($out, 'watcher', 'a member of pgbus_stream_monitor lists a private stream\'s presence') or diag($err);

my $c = $pg->sse('/streams/lobby?presence=1');
is($c->status, 401, '?presence=1 without a credential: 401, even on a public stream');
$c = $pg->sse('/streams/lobby?presence=1', headers => { Authorization => "Bearer $tok{alice}" });
is($c->status, 403, '?presence=1 with a credential for another stream: 403');
like($c->body, qr/presence/, '... saying why');
$c = $pg->sse('/streams/lobby', headers => { Authorization => "Bearer $tok{alice}" });
is($c->status, 200, 'the same credential still reads the public stream without presence');
ok(!grep({ ($_->{event} // '') eq 'pgbus:presence' } $c->events), 'and gets no presence frames');
$c->close;

# ---- bad input -----------------------------------------------------------------------------
$c = $pg->sse('/streams/room?presence=yes', headers => { Authorization => "Bearer $tok{alice}" });
is($c->status, 400, '?presence=yes: 400');
like($c->body, qr/invalid presence/, '... naming the parameter');
($rc, $out, $err) = $pg->psql('postgres', 'SELECT * FROM pgbus_stream.presence(NULL)');
like($err, qr/stream name must not be NULL/, 'presence(NULL) is an error');
($rc, $out, $err) = $pg->psql('postgres', "SELECT * FROM pgbus_stream.presence('nope')");
like($err, qr/stream "nope" does not exist/, 'presence of an unknown stream is an error');
is(presence_sql('room'), $after_stop, 'refused and bad requests left presence as it was');

$_->close for @alice, $anon, $watch, $lobby_watch;
wait_presence('room', '', 'every connection closed: no presence left');

$pg->finish;
done_testing();
