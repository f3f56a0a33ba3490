# 067_entry_release: shared memory holds an entry only for streams being
# watched or written, so an app whose users open record pages one after
# another never runs out of pgbus_stream.max_streams.
#
# With max_streams = 32: ten times that many distinct streams (the gem's
# auto-attached queues read with signed names, and create_stream ones) are
# subscribed one after another; each gets its broadcast exactly once, and
# the connection goes. The worker's entries come back down to the streams
# it serves (workers().streams), first because they run short (the linger
# has not passed), then with stream_linger = 0 at once. A stream whose entry
# was released and reused meanwhile, reconnected with its Last-Event-ID,
# gets exactly what was sent while nobody watched it, for both kinds; an
# ephemeral broadcast sent while it slept comes from the worker's memory,
# and a fresh stream works at the end.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use MIME::Base64 qw(encode_base64);
use Digest::SHA qw(hmac_sha256_hex);
use PgbusNode qw(sql_literal);

my $MAX = 32;
my $N = 10 * $MAX;
my $RAW = 'release-signing-secret';
my $pg = PgbusNode->new(
	'entryrelease',
	extension => 0,
	conf => "pgbus_stream.max_streams = $MAX\n"
	  . "pgbus_stream.signing_secret = '$RAW'\n"
	  . "pgbus_stream.stream_linger = '5s'\n");
$pg->safe_psql('postgres', slurp_file("$FindBin::Bin/../lib/pgmq_fixture.sql"));
$pg->safe_psql('postgres', 'CREATE EXTENSION pgbus_stream');
ok($pg->wait_workers(1), 'the worker runs');

sub q1 { return $pg->safe_psql('postgres', $_[0]) }

sub signed
{
	my $data = encode_base64('"' . $_[0] . '"', '');
	return "$data--" . hmac_sha256_hex($data, $RAW);
}

# Entries the worker holds; undef when workers() has no such figure.
sub held
{
	my ($rc, $out) = $pg->psql('postgres', 'SELECT sum(streams) FROM pgbus_stream.workers()');
	return $rc == 0 && $out ne '' ? $out : undef;
}

sub wait_held_at_most
{
	my ($n, $timeout) = @_;
	my $deadline = time + $timeout;
	while (time < $deadline)
	{
		my $h = held();
		return $h if defined $h && $h <= $n;
		sleep 0.1;
	}
	return held();
}

# Half the streams are the gem's (one PGMQ queue per record, auto-attached,
# read with a signed name), half made by create_stream (public).
my $half = $N / 2;
q1(join('', map { "SELECT pgmq.create('pgbus_rec_${_}_messages');\n" } 1 .. $half));
q1(join('', map { "SELECT pgbus_stream.create_stream('page_$_', public => true);\n" } 1 .. $half));
ok(defined $pg->wait_stream_served("page_$half"), 'the created streams are served');

sub path_of
{
	my ($i) = @_;
	# (?connected=1: the gem's route sends pgbus:connected, which says the
	# subscription is open, only when asked)
	return $i <= $half ? '/pgbus/streams/' . signed("rec_$i:messages") . '?connected=1' : '/streams/page_' . ($i - $half);
}

sub send_to
{
	my ($i, $html) = @_;
	return $i <= $half
	  ? q1("SELECT pgmq.send('pgbus_rec_${i}_messages', jsonb_build_object('html', " . sql_literal($html) . '))')
	  : q1('SELECT pgbus_stream.broadcast(' . sql_literal('page_' . ($i - $half)) . ', ' . sql_literal($html) . ')');
}

# ---- one stream after another: each its message once ------------------------
my (%last, @bad);
my $start = time;
for my $i (1 .. $N)
{
	my $c = $pg->sse(path_of($i));
	if ($c->status != 200)
	{
		push @bad, "$i: status " . $c->status;
		last;
	}
	$c->wait_for_events(1, 10);
	my $sent = eval { send_to($i, "hello $i"); 1 };
	if (!$sent)
	{
		push @bad, "$i: the broadcast failed: $@";
		last;
	}
	$c->wait_for_data_events(1, 10);
	$c->poll(0.05);
	my @d = $c->data_events;
	if (@d != 1 || $d[0]{data} ne "hello $i")
	{
		push @bad, "$i: got " . join('|', map { $_->{data} } @d);
		last;
	}
	$last{$i} = $d[0]{id};
	$c->close;
}
is_deeply(\@bad, [], "$N streams one after another (max_streams $MAX): each got its message once")
  or diag(join("\n", @bad));
note sprintf('%d subscriptions in %.1f s', scalar(keys %last), time - $start);

# Within the linger (5 s): entries were released because they ran short, so
# the worker holds well under max_streams although it served ten times as many.
my $h = held();
ok(defined $h && $h < $MAX, 'the worker holds fewer entries than max_streams right after (' . ($h // 'no figure') . ')');

# ---- reconnecting to streams whose entries were released and reused ---------
for my $i (1, $half + 1)
{
	my $kind = $i <= $half ? 'gem queue' : 'created stream';
	send_to($i, "missed $i a");
	send_to($i, "missed $i b");
	my $c = $pg->sse(path_of($i), headers => { 'Last-Event-ID' => $last{$i} // '0' });
	is($c->status, 200, "$kind: reconnect with Last-Event-ID: 200");
	$c->wait_for_data_events(2, 10);
	$c->poll(0.3);
	is_deeply([ map { $_->{data} } $c->data_events ], [ "missed $i a", "missed $i b" ],
		"$kind: exactly what was sent while its entry was released");
	is(scalar(grep { ($_->{event} // '') eq 'pgbus:gap-detected' } $c->events), 0, "$kind: no gap notice");
	my $now = ($c->data_events)[-1]{id};
	send_to($i, "live $i");
	$c->wait_for_data_events(3, 10);
	is(($c->data_events)[-1]{data} // '', "live $i", "$kind: then live");
	$last{$i} = ($c->data_events)[-1]{id};
	$c->close;
}

# ---- stream_linger = 0: released as soon as the last connection goes --------
q1(q{ALTER SYSTEM SET pgbus_stream.stream_linger = 0});
q1(q{SELECT pg_reload_conf()});
sleep 0.5;
my $open = $pg->sse(path_of(2));
$open->wait_for_events(1, 10);
ok(wait_held_at_most(1, 10) <= 1, 'with stream_linger = 0 the worker holds only the open stream (' . (held() // '?') . ')');
$open->close;
is(wait_held_at_most(0, 10), 0, 'and none once it closed');

# An ephemeral broadcast to a stream asleep: kept in the worker's memory.
{
	my $i = $half + 3;
	my $c = $pg->sse(path_of($i));
	$c->wait_for_events(1, 10);
	send_to($i, 'before');
	$c->wait_for_data_events(1, 10);
	my $id = ($c->data_events)[-1]{id};
	$c->close;
	is(wait_held_at_most(0, 10), 0, 'ephemeral: its entry released');
	q1(q{SELECT pgbus_stream.broadcast('page_3', 'ephemeral while asleep', durable => false)});
	send_to($i, 'durable while asleep');
	$c = $pg->sse(path_of($i), headers => { 'Last-Event-ID' => $id });
	$c->wait_for_data_events(2, 10);
	$c->poll(0.3);
	is_deeply([ map { $_->{data} } $c->data_events ], [ 'ephemeral while asleep', 'durable while asleep' ],
		'ephemeral: the broadcast sent while asleep comes from memory, in id order');
	is(scalar(grep { ($_->{event} // '') eq 'pgbus:gap-detected' } $c->events), 0, 'ephemeral: no gap notice');
	$c->close;
}

# ---- a fresh stream still works; nothing failed for want of an entry ---------
{
	$pg->create_stream('fresh_one');
	my $c = $pg->open_stream('fresh_one');
	is($c->status, 200, 'a fresh stream: 200');
	$pg->broadcast('fresh_one', 'fresh');
	ok($c->wait_for_data_events(1, 10), 'a fresh stream: its message arrives');
	$c->close;
	my $refused = q1(q{SELECT count(*) FROM pgbus_stream.diagnostics()
	                   WHERE event = 'rejected' AND detail LIKE '%max_streams%'});
	is($refused, '0', 'no subscription was refused for want of an entry');
	unlike(slurp_file($pg->logfile), qr/more streams in use at once than shared memory can track/,
		'no producer failed for want of an entry');
}

$pg->finish;
done_testing();
