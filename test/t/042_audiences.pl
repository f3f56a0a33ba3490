# 042_audiences: visible_to audiences and exclude on a real server. Two
# connections with different contexts (the ctx claim of their JWTs) see
# exactly their audiences' messages, live, replayed from the workers' memory
# and replayed from the table; unknown labels, no context and erroring rules
# hide (fail closed); a redefined audience applies within a second; a run of
# hidden messages does not hold up a later public one; an excluded
# connection misses that broadcast while a bystander gets it.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

my $pg = PgbusNode->new('aud', conf => "pgbus_stream.jwt_secret = 'aud-secret'\n");
$pg->create_stream('room', public => 0);
$pg->create_stream('cold', public => 0);
$pg->create_stream('open');
$pg->safe_psql(
	'postgres', q{
SELECT pgbus_stream.define_audience('admins', '$.role ? (@ == "admin")');
SELECT pgbus_stream.define_audience('staff', '$.role ? (@ == "admin" || @ == "viewer")');
SELECT pgbus_stream.define_audience('strict', 'strict $.a.b');
});

sub token
{
	my ($ctx) = @_;
	my $c = defined $ctx ? "'$ctx'" : 'NULL';
	return $pg->safe_psql('postgres',
		"SELECT pgbus_stream.sign_token(ARRAY['room', 'cold', 'open'], '1 hour', NULL, $c)");
}
my %tok = (
	admin => token('{"role":"admin"}'),
	viewer => token('{"role":"viewer","a":1}'),
	none => token(undef),
);

sub connect_as
{
	my ($who, $path) = @_;
	my $c = $pg->sse($path, headers => { Authorization => "Bearer $tok{$who}" });
	is($c->status, 200, "$who connects to $path");
	$c->wait_for_events(1, 10);
	return $c;
}

sub datas { return join('|', map { $_->{data} } $_[0]->data_events) }

# Each message says who may see it; "end" closes every round.
my @round = ([ 'public', undef ], [ 'secret', 'admins' ], [ 'staff only', 'staff' ],
	[ 'ghost', 'no_such_label' ], [ 'strict error', 'strict' ], [ 'end', undef ]);
my %expect = (
	admin => 'public|secret|staff only|end',
	viewer => 'public|staff only|end',
	none => 'public|end',
);

sub broadcast_round
{
	my ($stream) = @_;
	my $first;
	for my $m (@round)
	{
		my $id = $pg->broadcast($stream, $m->[0], undef, $m->[1]);
		$first //= $id;
	}
	return $first;
}

sub wait_end
{
	my ($c) = @_;
	$c->wait_until(sub { grep { $_->{data} eq 'end' } $_[0]->data_events }, 10);
}

# ---- live ----------------------------------------------------------------------
my %live = map { $_ => connect_as($_, '/streams/room') } qw(admin viewer none);
my $first = broadcast_round('room');
for my $who (qw(admin viewer none))
{
	wait_end($live{$who});
	is(datas($live{$who}), $expect{$who}, "live: $who sees exactly its audiences' messages");
}

# ---- replay from the workers' memory (the stream had connections) ----------------
for my $who (qw(admin viewer none))
{
	my $c = connect_as($who, '/streams/room?since=' . ($first - 1));
	wait_end($c);
	is(datas($c), $expect{$who}, "replay from memory: $who sees the same");
	$c->close;
}

# ---- replay from the table (nobody was connected to cold) ---------------------------
my $cold_first = broadcast_round('cold');
for my $who (qw(admin viewer none))
{
	my $c = connect_as($who, '/streams/cold?since=' . ($cold_first - 1));
	wait_end($c);
	is(datas($c), $expect{$who}, "replay from the table: $who sees the same");
	$c->close;
}

# ---- a public stream: an anonymous client sees unlabelled messages only ---------------
{
	my $anon = $pg->sse('/streams/open');
	$anon->wait_for_events(1, 10);
	broadcast_round('open');
	wait_end($anon);
	is(datas($anon), 'public|end', 'public stream, no credential: unlabelled messages only');
	$anon->close;
}

# ---- many hidden messages do not hold up a public one; the cursor covers them -------------
{
	my $v = $live{viewer};
	$pg->safe_psql('postgres', q{SELECT pgbus_stream.broadcast('room', 'hidden ' || i, visible_to => 'admins')
		FROM generate_series(1, 300) i});
	$pg->broadcast('room', 'after the hidden run');
	$v->wait_until(sub { grep { $_->{data} eq 'after the hidden run' } $_[0]->data_events }, 10);
	my @d = $v->data_events;
	is($d[-1]{data}, 'after the hidden run', 'viewer gets the public message after 300 hidden ones');
	my $resume = $d[-1]{id};
	my $again = $pg->sse('/streams/room', headers => { Authorization => "Bearer $tok{admin}", 'Last-Event-ID' => $resume });
	$again->wait_for_events(1, 10);
	$again->poll(0.5);
	is(scalar($again->data_events), 0, 'its id covers the hidden run: resuming from it gets nothing');
	$again->close;
	$live{admin}->wait_until(sub { grep { $_->{data} eq 'after the hidden run' } $_[0]->data_events }, 10);
	is(scalar(grep { $_->{data} =~ /^hidden / } $live{admin}->data_events), 300, 'admin got all 300');
}

# ---- a redefined audience applies to live connections within a second -------------------
{
	my ($a, $v) = @live{qw(admin viewer)};
	$pg->safe_psql('postgres', q{SELECT pgbus_stream.define_audience('admins', '$.role ? (@ == "viewer")')});
	my $t0 = time;
	my $n = 0;
	my $seen = 0;
	while (!$seen && time - $t0 < 5)
	{
		my $text = 'redefined ' . ++$n;
		$pg->broadcast('room', $text, undef, 'admins');
		$pg->broadcast('room', "marker $n");
		$v->wait_until(sub { grep { $_->{data} eq "marker $n" } $_[0]->data_events }, 5);
		$seen = grep { $_->{data} eq $text } $v->data_events;
	}
	my $took = time - $t0;
	ok($seen, "the viewer gets 'admins' messages after the redefinition");
	cmp_ok($took, '<', 1.5, "within a second of the redefinition (+ one round trip): ${took}s");
	$a->wait_until(sub { grep { $_->{data} eq "marker $n" } $_[0]->data_events }, 5);
	ok(!grep({ $_->{data} eq "redefined $n" } $a->data_events), 'and the admin no longer does');
	$pg->safe_psql('postgres', q{SELECT pgbus_stream.drop_audience('admins')});
}
$_->close for values %live;

# ---- exclude ------------------------------------------------------------------------------
{
	my $actor = connect_as('viewer', '/streams/room');
	my $bystander = connect_as('viewer', '/streams/room');
	my ($connected) = grep { ($_->{event} // '') eq 'pgbus:connected' } $actor->events;
	my ($actor_id) = $connected->{data} =~ /"connectionId":"([0-9a-f]{16})"/;
	ok($actor_id, "the actor's connection id: $actor_id");
	my $big = 'x' x 9000;    # larger than inline_payload_max: read back from the table
	$pg->safe_psql('postgres', qq{SELECT pgbus_stream.broadcast('room', 'echo', exclude => '$actor_id')});
	$pg->safe_psql('postgres', qq{SELECT pgbus_stream.broadcast('room', 'ephemeral echo', durable => false, exclude => '$actor_id')});
	$pg->safe_psql('postgres', qq{SELECT pgbus_stream.broadcast('room', '$big', exclude => '$actor_id')});
	$pg->broadcast('room', 'for all');
	for my $c ($actor, $bystander)
	{
		$c->wait_until(sub { grep { $_->{data} eq 'for all' } $_[0]->data_events }, 10);
	}
	is(datas($actor), 'for all', 'the excluded connection misses the three excluded broadcasts');
	is(datas($bystander), "echo|ephemeral echo|$big|for all", 'the bystander gets them all');
	$actor->close;
	$bystander->close;
}

$pg->finish;

# ---- connection ids are unique across workers (exclude names one connection) ---------------
{
	my $two = PgbusNode->new('aud2', conf => "pgbus_stream.workers = 2\n");
	$two->create_stream('many');
	my (@clients, %ids, %workers);
	for my $n (1 .. 40)
	{
		my $c = $two->sse('/streams/many');
		$c->wait_for_events(1, 10);
		my ($ev) = grep { ($_->{event} // '') eq 'pgbus:connected' } $c->events;
		my ($id) = ($ev->{data} // '') =~ /"connectionId":"([0-9a-f]{16})"/;
		$ids{$id}++ if $id;
		push @clients, $c;
		last if $n >= 12 && keys(%ids) == @clients && scalar(keys %workers) == 2;
		%workers = map { $_ => 1 } split /\n/,
		  $two->safe_psql('postgres', 'SELECT DISTINCT worker FROM pgbus_stream.connections()')
		  if $n >= 12;
	}
	is(scalar(keys %workers), 2, 'connections on both workers');
	is(scalar(keys %ids), scalar(@clients), 'every connection id is distinct across the workers');
	my $actor = $clients[0];
	my ($ev) = grep { ($_->{event} // '') eq 'pgbus:connected' } $actor->events;
	my ($actor_id) = $ev->{data} =~ /"connectionId":"([0-9a-f]{16})"/;
	$two->safe_psql('postgres', qq{SELECT pgbus_stream.broadcast('many', 'echo', exclude => '$actor_id')});
	$two->broadcast('many', 'for all');
	$_->wait_until(sub { grep { $_->{data} eq 'for all' } $_[0]->data_events }, 10) for @clients;
	is(datas($actor), 'for all', 'two workers: the excluded connection misses it');
	is(scalar(grep { datas($_) eq 'echo|for all' } @clients[1 .. $#clients]), $#clients,
		'every other connection, on either worker, gets it');
	$_->close for @clients;
	$two->finish;
}
done_testing();
