# 086_locked_queue_retry: a client that connects while its stream's queue
# table is locked is not turned away with an error a browser gives up on.
#
# Another session holds ACCESS EXCLUSIVE on the queue table (as ALTER TABLE
# or VACUUM FULL do). A client connecting with ?since=0 gets 200 and either
# a stream that carries only a short retry: and ends, or a stream that stays
# open until its reads succeed; a client that comes
# back as an EventSource does (after retry ms, with the same URL) gets its
# replay once the lock is gone, within a second of it. Every answer it met
# was 200. Other streams keep delivering meanwhile.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

my $pg = PgbusNode->new('main');
$pg->create_stream('chat');
$pg->create_stream('other');
my $queue = $pg->safe_psql('postgres',
	q{SELECT format('%I.%I', queue_schema, queue_table) FROM pgbus_stream.streams WHERE name = 'chat'});
my @sent = map { $pg->broadcast('chat', "m$_") } 1 .. 3;

my $locker = $pg->background_psql('postgres');
$locker->query_safe('BEGIN');
$locker->query_safe("LOCK TABLE $queue IN ACCESS EXCLUSIVE MODE");

# ---- one connection while the lock is held
my $c = $pg->sse('/streams/chat?since=0');
is($c->status, 200, 'a client connecting while the queue is locked gets 200')
  or diag('body: ' . $c->body);
is($c->header('content-type'), 'text/event-stream', 'an event stream');
# Either answer keeps a browser: the stream ends at once with a short
# retry: (a read that failed while the client was admitted), or it stays
# open with its preamble and pages the backlog once the lock is gone (a
# stream the worker already holds: its reads are retried, at most 1 s apart).
my $ended = $c->wait_until(sub { $_[0]{body_done} || $_[0]->closed }, 3);
my $retry = $c->retry;
if ($ended)
{
	pass('which ends');
	ok(defined $retry && $retry >= 250 && $retry <= 750,
		'and tells the client to come back soon (retry: ' . ($retry // 'none') . ')');
}
else
{
	ok(!$c->closed, 'which stays open while the lock is held');
	ok(defined $retry && $retry >= 250 && $retry <= 3000,
		'with a retry: for a later drop (' . ($retry // 'none') . ')');
}
is(scalar($c->data_events), 0, 'nothing else in it');
$c->close;

# Another stream is served meanwhile.
my $o = $pg->open_stream('other');
$pg->broadcast('other', 'x');
ok($o->wait_for_data_events(1, 10), 'another stream delivers while the lock is held');
$o->close;

# ---- an EventSource: it follows retry: and connects again with the same
# URL (and Last-Event-ID once it has an id), and gives up on any other
# status than 200. The lock goes 1.5 s after it starts.
my @statuses;
my ($released, $got_at, $got);
my $start = time;
my $deadline = $start + 30;
my $last_id;
while (time < $deadline)
{
	if (!defined $released && time - $start >= 1.5)
	{
		$locker->query_safe('COMMIT');
		$released = time;
	}
	my $es = $pg->sse('/streams/chat?since=0',
		headers => defined $last_id ? { 'Last-Event-ID' => $last_id } : {});
	push @statuses, $es->status;
	last if $es->status != 200;
	$es->wait_until(sub { $_[0]{body_done} || $_[0]->closed || scalar($_[0]->data_events) >= 3 },
		5);
	$last_id = $es->last_event_id // $last_id;
	if (scalar($es->data_events) >= 3)
	{
		$got_at = time;
		$es->poll(0.3);
		$got = [ map { $_->{data} } $es->data_events ];
		$es->close;
		last;
	}
	my $wait = ($es->retry // 2000) / 1000;
	$es->close;
	sleep $wait;
}
$locker->quit;
ok(!grep({ $_ != 200 } @statuses), 'every answer the EventSource met was 200 (' . scalar(@statuses)
	  . ' connections)')
  or diag("statuses: @statuses");
is_deeply($got, [ 'm1', 'm2', 'm3' ], 'its replay arrives once the lock is gone, each message once');
ok(defined $got_at && defined $released && $got_at - $released <= 1.0,
	sprintf('within a second of the lock going (%.3f s)', defined $got_at && defined $released
		? $got_at - $released : -1));

$pg->finish;
done_testing();
