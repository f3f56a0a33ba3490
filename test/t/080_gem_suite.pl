# 080_gem_suite: the scenarios of the pgbus gem's own streamer test suite,
# run against the gem's route (/pgbus/streams/<signed name>) with queues
# made the gem's way (pgmq.create, its ALTER TABLEs, PGMQ's NOTIFY trigger)
# and broadcasts by pgmq.send of its envelope, counting events as its test
# client does: every block with an id, event or data field (so an extra
# frame, such as a pgbus:connected nobody asked for, fails them).
#
#  - page born stale: W = max id; A, B sent; ?since=W gets exactly A, B;
#    then C live
#  - reconnect: 1..3 with ?since=0; 4, 5 sent; Last-Event-ID of 3 (the
#    integer, and the id this server sent) gets exactly 4, 5; again with
#    nothing new: no event
#  - replay: since=0 all, since=W-2 the last two, since=W none
#  - transactions: commit, rollback, commit: exactly the two committed
#  - audience: admin and viewer on one stream: [public, secret] and [public]
#  - 20 parallel connections, 3 events each, within 2 s
#  - endpoint: missing token, bad token refused; bad cursors 400; the open
#    comment names since_id (Last-Event-ID beats ?since) and stream=
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;
use GemApp qw(gem_create gem_send gem_send_sql signed jwt);

my $KEY = 'gem-suite-signing-secret';
my $JWT = 'gem-suite-jwt-secret';
my $pg = PgbusNode->new(
	'gemsuite',
	extension => 0,
	heartbeat => 15,
	conf => "pgbus_stream.signing_secret = '$KEY'\n"
	  . "pgbus_stream.jwt_secret = '$JWT'\n"
	  . "pgbus_stream.token_cookie = 'pgbus_token'\n");
$pg->safe_psql('postgres', slurp_file("$FindBin::Bin/../lib/pgmq_fixture.sql"));
$pg->safe_psql('postgres', 'CREATE EXTENSION pgbus_stream');

my $case = 0;

# A fresh stream per case, its queue made the gem's way before connecting.
sub fresh
{
	my $name = 'suite_' . ++$case . ':messages';
	gem_create($pg, $name);
	return $name;
}

sub connect_gem
{
	my ($name, %opt) = @_;
	my $query = delete $opt{query};
	return $pg->sse('/pgbus/streams/' . signed($name, $KEY) . (defined $query ? "?$query" : ''), %opt);
}

sub max_id
{
	my ($name) = @_;
	return $pg->safe_psql('postgres',
		'SELECT coalesce(max(msg_id), 0) FROM pgmq.q_' . lc(GemApp::gem_queue($name)));
}

# The gem's client: every block with an id, event or data field.
sub counted { return map { $_->{data} } $_[0]->events }

sub settle { my ($c, $s) = @_; $c->poll($s // 0.5); return }

# ---- page born stale ----------------------------------------------------------
{
	my $name = fresh();
	gem_send($pg, $name, "old $_") for 1 .. 2;
	my $w = max_id($name);
	gem_send($pg, $name, $_) for qw(A B);
	my $c = connect_gem($name, query => "since=$w");
	is($c->status, 200, 'born stale: 200');
	ok($c->wait_for_events(2, 10), 'born stale: two events');
	settle($c);
	is_deeply([ counted($c) ], [qw(A B)], 'born stale: exactly A, B, in order (nothing else counted)');
	gem_send($pg, $name, 'C');
	ok($c->wait_for_events(3, 10), 'born stale: C live');
	settle($c);
	is_deeply([ counted($c) ], [qw(A B C)], 'born stale: then exactly C');
	$c->close;
}

# ---- reconnect ----------------------------------------------------------------
{
	my $name = fresh();
	my @ids = map { gem_send($pg, $name, "m$_") } 1 .. 3;
	my $c = connect_gem($name, query => 'since=0');
	ok($c->wait_for_events(3, 10), 'reconnect: 1..3 with ?since=0');
	settle($c);
	is_deeply([ counted($c) ], [qw(m1 m2 m3)], 'reconnect: exactly 1..3');
	my $sent_id = ($c->events)[-1]{id};
	$c->close;
	gem_send($pg, $name, "m$_") for 4 .. 5;
	for my $last ([ 'the integer msg_id', $ids[2] ], [ 'the id this server sent', $sent_id ])
	{
		$c = connect_gem($name, headers => { 'Last-Event-ID' => $last->[1] });
		ok($c->wait_for_events(2, 10), "reconnect with $last->[0]: events");
		settle($c);
		is_deeply([ counted($c) ], [qw(m4 m5)], "reconnect with $last->[0]: exactly 4, 5");
		$sent_id = ($c->events)[-1]{id};
		$c->close;
	}
	$c = connect_gem($name, headers => { 'Last-Event-ID' => $sent_id });
	is($c->status, 200, 'reconnect with nothing new: 200');
	settle($c, 1.5);
	is($c->event_count, 0, 'reconnect with nothing new: no event');
	$c->close;
}

# ---- replay -------------------------------------------------------------------
{
	my $name = fresh();
	gem_send($pg, $name, "r$_") for 1 .. 5;
	my $w = max_id($name);
	my %want = (0 => [ map { "r$_" } 1 .. 5 ], ($w - 2) => [qw(r4 r5)], $w => []);
	for my $since (0, $w - 2, $w)
	{
		my $c = connect_gem($name, query => "since=$since");
		$c->wait_for_events(scalar @{ $want{$since} }, 10) if @{ $want{$since} };
		settle($c, 1);
		is_deeply([ counted($c) ], $want{$since}, "replay since=$since: " . scalar(@{ $want{$since} }) . ' events');
		$c->close;
	}
}

# ---- transactions -------------------------------------------------------------
{
	my $name = fresh();
	my $c = connect_gem($name, query => 'since=' . max_id($name));
	is($c->status, 200, 'transactions: 200');
	$pg->safe_psql('postgres', "BEGIN; " . gem_send_sql($name, 'committed 1') . "; COMMIT;");
	$pg->safe_psql('postgres', "BEGIN; " . gem_send_sql($name, 'rolled back') . "; ROLLBACK;");
	$pg->safe_psql('postgres', "BEGIN; " . gem_send_sql($name, 'committed 2') . "; COMMIT;");
	ok($c->wait_for_events(2, 10), 'transactions: events');
	settle($c, 1);
	is_deeply([ counted($c) ], [ 'committed 1', 'committed 2' ], 'transactions: exactly the two committed');
	$c->close;
}

# ---- audience -----------------------------------------------------------------
{
	$pg->safe_psql('postgres',
		q{SELECT pgbus_stream.define_audience('admin_only', '$.role ? (@ == "admin")')});
	my $name = fresh();
	my $since = max_id($name);
	my $admin = connect_gem($name,
		query => "since=$since",
		headers => { Cookie => 'pgbus_token=' . jwt($JWT, sub => 'u1', ctx => '{"role":"admin"}') });
	my $viewer = connect_gem($name,
		query => "since=$since",
		headers => { Authorization => 'Bearer ' . jwt($JWT, sub => 'u2', ctx => '{"role":"viewer"}') });
	is($admin->status, 200, 'audience: admin 200');
	is($viewer->status, 200, 'audience: viewer 200');
	gem_send($pg, $name, 'public');
	gem_send($pg, $name, 'secret', 'admin_only');
	ok($admin->wait_for_events(2, 10), 'audience: admin events');
	ok($viewer->wait_for_events(1, 10), 'audience: viewer events');
	settle($admin);
	settle($viewer, 1);
	is_deeply([ counted($admin) ], [qw(public secret)], 'audience: admin gets [public, secret]');
	is_deeply([ counted($viewer) ], ['public'], 'audience: viewer gets [public]');
	$_->close for $admin, $viewer;
}

# ---- 20 parallel connections --------------------------------------------------
{
	my $name = fresh();
	my $since = max_id($name);
	my @c = map { connect_gem($name, query => "since=$since") } 1 .. 20;
	is(scalar(grep { $_->status == 200 } @c), 20, 'parallel: 20 connections answered 200');
	my $t0 = time;
	$pg->safe_psql('postgres', join(';', map { gem_send_sql($name, "p$_") } 1 .. 3));
	my $all = 1;
	for my $c (@c)
	{
		$all &&= $c->wait_for_events(3, 2 - (time - $t0) > 0 ? 2 - (time - $t0) : 0.01);
	}
	ok($all, 'parallel: 3 events on each within 2 s') or diag(sprintf('%.2f s', time - $t0));
	settle($c[-1], 0.3);
	is(scalar(grep { join(',', counted($_)) eq 'p1,p2,p3' } @c), 20, 'parallel: each exactly p1, p2, p3');
	$_->close for @c;
}

# ---- endpoint -----------------------------------------------------------------
{
	my $name = fresh();
	for my $bad ([ 'missing token', '/pgbus/streams/' ], [ 'bad token', '/pgbus/streams/' . signed($name, 'wrong key') ],
		[ 'garbage token', '/pgbus/streams/not-a-token' ])
	{
		my $c = $pg->sse($bad->[1]);
		ok($c->status >= 400 && $c->status < 500, "endpoint: $bad->[0] refused ($bad->[0]: " . $c->status . ')');
		$c->close;
	}
	for my $cursor ('+10', '%2B10', '1.5', '-1', 'abc', '%2010', '10%20', '9223372036854775808')
	{
		my $c = connect_gem($name, query => "since=$cursor");
		is($c->status, 400, "endpoint: ?since=$cursor is 400");
		$c->wait_closed(5);
		like($c->body, qr/cursor/, "endpoint: ?since=$cursor says why");
		$c->close;
	}
	for my $cursor ('+10', '1.5', '-1', 'abc')
	{
		my $c = connect_gem($name, headers => { 'Last-Event-ID' => $cursor });
		is($c->status, 400, "endpoint: Last-Event-ID $cursor is 400");
		$c->close;
	}
	my $c = connect_gem($name, query => 'since=2', headers => { 'Last-Event-ID' => '5' });
	is($c->status, 200, 'endpoint: integer cursors 200');
	ok(defined $c->wait_for_comment(qr/^pgbus stream open /, 10), 'endpoint: the open comment');
	my ($open) = grep { /^pgbus stream open / } $c->comments;
	like($open, qr/\bsince_id=5\b/, 'endpoint: since_id names Last-Event-ID, which beats ?since');
	(my $stream = $name) =~ s/:/_/g;
	like($open, qr/\bstream=\Q$stream\E$/, 'endpoint: stream= names the stream');
	$c->close;
	$c = connect_gem($name, query => 'since=9223372036854775807');
	is($c->status, 200, 'endpoint: ?since=2^63-1 is 200');
	$c->close;
}

$pg->finish;
done_testing();
