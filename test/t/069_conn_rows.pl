# 069_conn_rows: a worker's connections() and presence() rows follow its
# connections one by one (a join appends a row, a leave moves the last row
# into its place). 300 connections over 3 rounds, on three streams (some on
# two at once), anonymous or under one of four identities, opened and closed
# in a shuffled order; after each round connections() lists exactly the
# connections still open with their streams, presence() counts exactly
# them per stream and identity, a ?presence=1 connection's frames add up
# to the same counts, and all of it still holds after the periodic refresh
# has been over every row.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use JSON::PP;
use List::Util qw(shuffle);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

my $seed = $ENV{CONN_ROWS_SEED} // 69;
srand($seed);
note("seed $seed (CONN_ROWS_SEED)");

my $pg = PgbusNode->new('conn_rows',
	conf => "pgbus_stream.workers = 1\npgbus_stream.jwt_secret = 'rows-secret'\n");
$pg->wait_workers(1) or BAIL_OUT('the worker did not start');
my @streams = qw(r0 r1 r2);
$pg->create_stream($_) for @streams;

my @who = (undef, qw(u0 u1 u2 u3));
my %tok;
for my $sub (@who, 'watcher')
{
	my $lit = defined $sub ? PgbusNode::sql_literal($sub) : 'NULL';
	$tok{ $sub // '-' } =
	  $pg->safe_psql('postgres', "SELECT pgbus_stream.sign_token(ARRAY['r0','r1','r2'], '1 hour', $lit)");
}

sub conn_id
{
	my ($c) = @_;
	my ($f) = grep { ($_->{event} // '') eq 'pgbus:connected' } $c->events;
	return $f && $f->{data} =~ /"connectionId":"([0-9a-f]+)"/ ? $1 : undef;
}

# The watcher: its own connection on r0, counted like the others.
my $watch = $pg->sse('/streams/r0?presence=1', headers => { Authorization => "Bearer $tok{watcher}" });
is($watch->status, 200, 'a ?presence=1 connection on r0');
my %watched; # sub => count, as the watcher's frames say

sub read_watch_frames
{
	$watch->poll(0);
	for my $e ($watch->take_events)
	{
		next unless ($e->{event} // '') eq 'pgbus:presence';
		my $f = decode_json($e->{data});
		next unless ($f->{stream} // '') eq 'r0';
		if ($f->{action} eq 'snapshot')
		{
			%watched = map { ($_->{sub} // '-') => $_->{count} } @{ $f->{members} };
		}
		else
		{
			$watched{ $f->{sub} // '-' } = $f->{count};
		}
	}
	delete $watched{$_} for grep { !$watched{$_} } keys %watched;
}

my %open; # conn id => { c => client, streams => [names], sub => identity or '-' }
my $wid;

sub truth_rows
{
	my %rows = map { $_ => join(',', sort @{ $open{$_}{streams} }) } keys %open;
	$rows{$wid} = 'r0';
	return \%rows;
}

sub truth_presence
{
	my ($stream) = @_;
	my %n;
	$n{ $_->{sub} }++ for grep { grep { $_ eq $stream } @{ $_->{streams} } } values %open;
	$n{watcher}++ if $stream eq 'r0';
	return \%n;
}

sub sql_rows
{
	my %rows;
	for (split /\n/, $pg->safe_psql('postgres', "SELECT id || ' ' || streams FROM pgbus_stream.connections()"))
	{
		my ($id, $s) = split / /, $_, 2;
		$rows{$id} = exists $rows{$id} ? 'TWICE' : join(',', sort split /,/, $s // '');
	}
	return \%rows;
}

sub sql_presence
{
	my ($stream) = @_;
	my %n = map { my ($k, $v) = split /=/; ($k => $v + 0) } split /\n/,
	  $pg->safe_psql('postgres',
		"SELECT coalesce(sub, '-') || '=' || connections FROM pgbus_stream.presence('$stream')");
	return \%n;
}

sub same { return JSON::PP->new->canonical->encode($_[0]) eq JSON::PP->new->canonical->encode($_[1]) }

# Waits (10 s at most) for every view to match the client's truth; returns
# the first view that does not, or undef.
sub views_match
{
	my $deadline = time + 10;
	my $bad;
	while (1)
	{
		$bad = undef;
		read_watch_frames();
		if (!same(sql_rows(), truth_rows())) { $bad = 'connections()' }
		elsif (!same(\%watched, truth_presence('r0'))) { $bad = 'the watcher\'s frames' }
		else
		{
			for my $s (@streams)
			{
				$bad = "presence('$s')" unless same(sql_presence($s), truth_presence($s));
				last if $bad;
			}
		}
		return $bad if !$bad || time > $deadline;
		sleep 0.1;
	}
}

sub diag_views
{
	my %want = %{ truth_rows() };
	my %got = %{ sql_rows() };
	my @missing = grep { !exists $got{$_} } sort keys %want;
	my @extra = grep { !exists $want{$_} } sort keys %got;
	my @wrong = grep { exists $want{$_} && $got{$_} ne $want{$_} } sort keys %got;
	diag("connections(): missing @missing; extra @extra; wrong streams @wrong");
	diag("presence('$_'): got " . encode_json(sql_presence($_)) . ' want ' . encode_json(truth_presence($_)))
	  for @streams;
	diag('watcher: got ' . encode_json(\%watched) . ' want ' . encode_json(truth_presence('r0')));
}

$watch->wait_for_events(1, 10);
$wid = conn_id($watch);
ok($wid, 'the watcher has a connection id');

for my $round (1 .. 3)
{
	my $opened = 0;
	for my $n (1 .. 100)
	{
		my @on = (shuffle @streams)[ 0 .. (rand() < 0.3 ? 1 : 0) ];
		my $sub = $who[ int rand @who ];
		my $path = @on == 1 ? "/streams/$on[0]" : '/streams?' . join('&', map { "stream=$_" } @on);
		my %h = defined $sub ? (headers => { Authorization => "Bearer $tok{$sub}" }) : ();
		my $c = $pg->sse($path, %h);
		next unless $c->status == 200 && $c->wait_for_events(1, 10);
		my $id = conn_id($c) or next;
		$open{$id} = { c => $c, streams => \@on, sub => $sub // '-' };
		$opened++;
		# now and then, one of the open ones leaves meanwhile
		if (rand() < 0.25)
		{
			my ($gone) = (shuffle keys %open)[0];
			delete($open{$gone})->{c}->close;
		}
	}
	is($opened, 100, "round $round: 100 connections opened");
	my @ids = shuffle keys %open;
	delete($open{$_})->{c}->close for @ids[ 0 .. int(@ids * 0.55) - 1 ];
	my $left = keys %open;
	my $bad = views_match();
	ok(!$bad, "round $round: connections(), presence() and the watcher's frames match the $left open connections")
	  or diag_views();
	sleep 1.5; # three refreshes of every row
	$bad = views_match();
	ok(!$bad, "round $round: and still after the periodic refresh") or diag_views();
}

delete($open{$_})->{c}->close for shuffle keys %open;
ok(!views_match(), 'every connection closed but the watcher: one row left, presence of r0 is the watcher')
  or diag_views();
$watch->close;

$pg->finish;
done_testing();
