# 058_unwatched_queues: auto-attached queues nobody watches take no room in
# shared memory, whatever their number.
#
# 300 of the gem's queues, 64 shared-memory stream entries
# (pgbus_stream.max_streams). After a restart (the workers read the whole
# catalog) and after a catalog change (they read it again), the workers hold
# no entry for the 300 unwatched queues. Then five of them are watched and
# written: every producer's send succeeds and every subscriber receives its
# message. A worker that took an entry for every queue in the catalog would
# fill shared memory with queues nobody watches, and a producer writing to a
# watched queue whose stream found no room would fail ("more streams in use at
# once than shared memory can track").
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use PgbusNode;

my $QUEUES = 300;
my $pg = PgbusNode->new('unwatched', extension => 0, bearer_all => 1,
	conf => "pgbus_stream.max_streams = 64\npgbus_stream.workers = 2\nfsync = off\n");
$pg->safe_psql('postgres', slurp_file("$FindBin::Bin/../lib/pgmq_fixture.sql"));
$pg->safe_psql('postgres',
	"SELECT pgmq.create('pgbus_ai_chat_' || i || '_messages') FROM generate_series(1, $QUEUES) i");
$pg->safe_psql('postgres', 'CREATE EXTENSION pgbus_stream');
is($pg->safe_psql('postgres', 'SELECT count(*) FROM pgbus_stream.streams WHERE auto_attached'),
	$QUEUES, "$QUEUES queues auto-attached");

sub entries { return $pg->safe_psql('postgres', 'SELECT count(*) FROM pgbus_stream._stream_stats()') }

$pg->restart;
$pg->wait_http_ready or die 'listener not back';
is(scalar($pg->wait_workers(2)), 2, 'two workers after the restart');
# The workers read the catalog at start; a subscription to a stream made
# now is served only after that, so it tells when they are done.
$pg->create_stream('marker');
cmp_ok(entries(), '<=', 1, 'after a restart: no shared-memory entry for the unwatched queues');

$pg->create_stream('marker2'); # a catalog change: the workers read the catalog again
cmp_ok(entries(), '<=', 2, 'after a catalog change: still none');

my @watched = (10, 100, 200, 250, 299);
my %c;
for my $i (@watched)
{
	$c{$i} = $pg->open_stream("ai_chat_${i}_messages");
	is($c{$i}->status, 200, "subscribed to ai_chat_${i}_messages");
}
for my $i (@watched)
{
	my ($rc, $out, $err) =
	  $pg->psql('postgres', "SELECT pgmq.send('pgbus_ai_chat_${i}_messages', '{\"html\": \"record $i\"}')");
	is($rc, 0, "pgmq.send into watched queue $i succeeds") or diag($err);
}
for my $i (@watched)
{
	$c{$i}->wait_for_data_events(1, 15);
	is_deeply([ map { $_->{data} } $c{$i}->data_events ], ["record $i"], "ai_chat_${i}_messages got its message");
}
cmp_ok(entries(), '<=', 2 + @watched, 'shared memory holds the watched streams only');
$_->close for values %c;

$pg->finish;
done_testing();
