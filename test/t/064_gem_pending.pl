# 064_gem_pending: a page subscribes before the gem created its stream's
# queue (the gem makes it at the first broadcast).
#
# With a signed name or a JWT that covers it, the subscription gets 200,
# retry:, the open comment and heartbeats, and waits; pgmq.create (the
# auto_attach event trigger hooks the queue in that very transaction) and
# pgmq.send then reach it: every row of the new queue exactly once, in order,
# whether create and send share a transaction or not, with ?since=0, on both
# workers, and on a connection that also names a stream that exists. A
# reconnect with the last id gets exactly what followed. An unsigned unknown
# name is still refused, and waiting streams are bounded
# (pgbus_stream.max_pending_streams) and freed when their clients leave.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use MIME::Base64 qw(encode_base64 encode_base64url);
use Digest::SHA qw(hmac_sha256 hmac_sha256_hex);
use PgbusNode qw(sql_literal);

my $RAW = 'pending-signing-secret';
my $JWT = 'pending-jwt-secret';
my $MAX_PENDING = 4;
my $pg = PgbusNode->new(
	'gempending',
	extension => 0,
	conf => "pgbus_stream.workers = 2\n"
	  . "pgbus_stream.signing_secret = '$RAW'\n"
	  . "pgbus_stream.jwt_secret = '$JWT'\n"
	  . "pgbus_stream.max_pending_streams = $MAX_PENDING\n");
$pg->safe_psql('postgres', slurp_file("$FindBin::Bin/../lib/pgmq_fixture.sql"));
$pg->safe_psql('postgres', 'CREATE EXTENSION pgbus_stream');
ok($pg->wait_workers(2), 'two workers');

sub q1 { return $pg->safe_psql('postgres', $_[0]) }

sub signed
{
	my $data = encode_base64('"' . $_[0] . '"', '');
	return "$data--" . hmac_sha256_hex($data, $RAW);
}

sub jwt
{
	my ($streams) = @_;
	my $input = encode_base64url('{"alg":"HS256","typ":"JWT"}') . '.'
	  . encode_base64url('{"streams":[' . join(',', map { qq{"$_"} } @$streams)
		  . '],"exp":' . (int(time) + 3600) . '}');
	return "$input." . encode_base64url(hmac_sha256($input, $JWT));
}

sub send_sql
{
	my ($queue, $html) = @_;
	return "SELECT pgmq.send('$queue', jsonb_build_object('html', " . sql_literal($html) . '))';
}

# -1 where workers() has no such column (a build without waiting subscriptions)
sub pending_total
{
	my ($rc, $out) = $pg->psql('postgres', 'SELECT coalesce(sum(pending), 0) FROM pgbus_stream.workers()');
	return $rc == 0 ? $out : -1;
}

sub workers_waiting
{
	my ($rc, $out) =
	  $pg->psql('postgres', 'SELECT count(*) FROM pgbus_stream.workers() WHERE pending > 0');
	return $rc == 0 ? $out : -1;
}

sub wait_pending
{
	my ($n) = @_;
	my $deadline = time + 10;
	sleep 0.05 while time < $deadline && pending_total() != $n;
	return pending_total() == $n;
}

sub datas { return [ map { $_->{data} } $_[0]->data_events ] }

# Opens a subscription that waits; checks what a gem element sees first.
sub open_pending
{
	my ($path, $what, %opt) = @_;
	my $c = $pg->sse($path, %opt);
	is($c->status, 200, "$what: 200 before the queue exists");
	$c->wait_for_events(1, 10);
	like($c->body, qr/\Aretry: (?:1\d{3}|2\d{3}|3000)\n/, "$what: retry: (1 to 3 s) first");
	return $c;
}

# ---- a signed name, create and sends in separate transactions --------------
{
	my $c = open_pending('/pgbus/streams/' . signed('ai_chat_01:messages'), 'signed name');
	like($c->body, qr/^: pgbus stream open since_id=0 stream=ai_chat_01_messages$/m,
		'signed name: the open comment names the stream');
	ok(defined $c->wait_for_comment(qr/^heartbeat \d+$/, 5), 'signed name: heartbeats while waiting');
	ok(wait_pending(1), 'signed name: one subscription waits (workers().pending)');
	my $queue = 'pgbus_ai_chat_01_messages';
	my $hooked = q1("BEGIN; SELECT pgmq.create('$queue');
	                 SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pgmq.q_$queue'::regclass; COMMIT;");
	is((split /\n/, $hooked)[-1], '1', 'the creating transaction hooked the awaited queue');
	q1(send_sql($queue, "m$_")) for 1 .. 3;
	ok($c->wait_for_data_events(3, 10), 'signed name: the first broadcasts arrive');
	$c->poll(0.3);
	is_deeply(datas($c), [qw(m1 m2 m3)], 'signed name: each once, in order');
	ok(wait_pending(0), 'signed name: no longer waiting');
	my $last = (map { $_->{id} } $c->data_events)[-1] // '0';
	$c->close;

	# Reconnect with the last id: exactly what followed.
	q1(send_sql($queue, "m$_")) for 4 .. 5;
	$c = $pg->sse('/pgbus/streams/' . signed('ai_chat_01:messages'),
		headers => { 'Last-Event-ID' => $last });
	is($c->status, 200, 'reconnect with the last id: 200');
	ok($c->wait_for_data_events(2, 10), 'reconnect: what was sent meanwhile arrives');
	$c->poll(0.3);
	is_deeply(datas($c), [qw(m4 m5)], 'reconnect: exactly that');
	$c->close;
}

# ---- a JWT, create and sends in one transaction; ?since=0 -------------------
{
	my $token = jwt(['room_7*']);
	my $c = open_pending('/streams/room_7_x?since=0', 'JWT',
		headers => { Authorization => "Bearer $token" });
	like($c->body, qr/^: pgbus stream open since_id=0 stream=room_7_x$/m, 'JWT: the open comment');
	ok(defined $c->wait_for_comment(qr/^heartbeat \d+$/, 5), 'JWT: heartbeats while waiting');
	q1("BEGIN; SELECT pgmq.create('pgbus_room_7_x'); " . send_sql('pgbus_room_7_x', 'a') . '; '
		  . send_sql('pgbus_room_7_x', 'b') . '; COMMIT;');
	ok($c->wait_for_data_events(2, 10), 'JWT: the rows of the creating transaction arrive');
	q1(send_sql('pgbus_room_7_x', 'c'));
	ok($c->wait_for_data_events(3, 10), 'JWT: then live ones');
	$c->poll(0.3);
	is_deeply(datas($c), [qw(a b c)], 'JWT: each once, in order');
	$c->close;

	# A JWT that does not cover the name: refused, nothing waits.
	$c = $pg->sse('/streams/other_1', headers => { Authorization => "Bearer $token" });
	is($c->status, 403, 'a JWT that does not cover an unknown name: 403');
	$c->close;
}

# ---- an unsigned unknown name is refused ------------------------------------
{
	my $c = $pg->sse('/streams/nobody_here');
	is($c->status, 401, 'an unknown name without a credential: 401');
	$c->close;
	is(pending_total(), 0, 'and nothing waits for it');
}

# ---- waiting on both workers ------------------------------------------------
{
	my $token = jwt(['both_*']);
	my @c;
	for (1 .. 24)
	{
		push @c, $pg->sse('/streams/both_w', headers => { Authorization => "Bearer $token" });
		$c[-1]->wait_for_events(1, 10);
		last if @c >= 2 && workers_waiting() == 2;
	}
	is(workers_waiting(), '2', 'subscriptions wait on both workers (' . scalar(@c) . ' connections)');
	q1(q{SELECT pgmq.create('pgbus_both_w')});
	q1(send_sql('pgbus_both_w', "w$_")) for 1 .. 3;
	for my $i (0 .. $#c)
	{
		$c[$i]->wait_for_data_events(3, 10);
	}
	$_->poll(0.2) for @c;
	my @bad = grep { join(',', @{ datas($c[$_]) }) ne 'w1,w2,w3' } 0 .. $#c;
	is(scalar @bad, 0, 'every waiting connection, on either worker, got w1 w2 w3 once')
	  or diag(join('; ', map { "$_: " . join(',', @{ datas($c[$_]) }) } @bad));
	$_->close for @c;
}

# ---- several streams, one exists --------------------------------------------
{
	q1(q{SELECT pgmq.create('pgbus_multi_old')});
	my $token = jwt(['multi_*']);
	my $c = open_pending('/streams?stream=multi_old&stream=multi_new', 'several streams',
		headers => { Authorization => "Bearer $token" });
	like($c->body, qr/^: pgbus stream open since_id=\S+ stream=multi_old,multi_new$/m,
		'several streams: both named');
	q1(send_sql('pgbus_multi_old', 'old1'));
	ok($c->wait_for_data_events(1, 10), 'the existing stream is live at once');
	q1(q{SELECT pgmq.create('pgbus_multi_new')});
	q1(send_sql('pgbus_multi_new', 'new1'));
	q1(send_sql('pgbus_multi_old', 'old2'));
	ok($c->wait_for_data_events(3, 10), 'the new stream joins the connection');
	$c->poll(0.3);
	is_deeply([ sort @{ datas($c) } ], [qw(new1 old1 old2)], 'several streams: each message once');
	like((map { $_->{id} } $c->data_events)[-1] // '', qr/,/, 'the id names both streams');
	$c->close;
}

# ---- bounded, and freed when clients leave ----------------------------------
{
	ok(wait_pending(0), 'nothing waits');
	my $token = jwt(['cap_*']);
	my @c = map {
		my $c = $pg->sse("/streams/cap_$_", headers => { Authorization => "Bearer $token" });
		$c->wait_for_events(1, 10);
		$c
	} 1 .. $MAX_PENDING;
	is(join(',', map { $_->status } @c), join(',', (200) x $MAX_PENDING),
		"$MAX_PENDING distinct streams may be awaited");
	my $over = $pg->sse('/streams/cap_over', headers => { Authorization => "Bearer $token" });
	is($over->status, 503, 'one more: 503');
	like($over->body, qr/max_pending_streams/, 'saying which setting bounds it');
	$over->close;
	# a second subscription to a stream already awaited takes no place
	my $same = $pg->sse('/streams/cap_1', headers => { Authorization => "Bearer $token" });
	is($same->status, 200, 'another subscription to an awaited stream: 200');
	$same->close;
	$c[0]->close;
	my $deadline = time + 10;
	my $status = 0;
	while (time < $deadline)
	{
		my $t = $pg->sse('/streams/cap_over', headers => { Authorization => "Bearer $token" });
		$status = $t->status;
		$t->close;
		last if $status == 200;
		sleep 0.1;
	}
	is($status, 200, 'a client that left frees its place');
	$_->close for @c;
	ok(wait_pending(0), 'every place freed');
}

$pg->finish;
done_testing();
