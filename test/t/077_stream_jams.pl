# 077_stream_jams: one bad row or id never stalls or jams a stream.
#
# A row with enqueued_at = 'infinity' (or '-infinity'), its payload above
# pgbus_stream.inline_payload_max so the worker reads it from the table, is
# delivered like any row: to live subscribers, and with everything before
# and after it on replay=all. A row whose value cannot be read at all (its
# TOAST chunks gone, as after a corruption) is skipped with a
# pgbus:gap-detected naming it (reason "unreadable"), live and on replay,
# counted in stats().failed and warned about once; the stream goes on. An
# explicit msg_id above the queue's sequence (9223372036854775807, or just
# above) is refused with a clear error, so the stream's committed maximum
# never passes what the sequence will draw: the producers that follow,
# superuser or not, go on.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use PgbusNode qw(sql_literal);

my $pg = PgbusNode->new('jams', conf => "pgbus_stream.inline_payload_max = 16\n");

sub q1 { return $pg->safe_psql('postgres', $_[0]) }

sub err_of
{
	my ($sql, $user) = @_;
	my ($rc, $out, $err) =
	  $pg->psql('postgres', $sql, $user ? (extra_params => [ '-U', $user ]) : ());
	return $rc == 0 ? undef : $err;
}

sub datas { return map { $_->{data} } $_[0]->data_events }

sub gaps
{
	return map { $_->{data} } grep { ($_->{event} // '') eq 'pgbus:gap-detected' } $_[0]->events;
}

my $pad = 'x' x 64;    # above inline_payload_max: the worker reads these rows

# ---- enqueued_at = 'infinity' ----
$pg->create_stream('inf');
my $q = 'pgbus_stream.q_pgbus_inf';
my $live = $pg->open_stream('inf');
is($live->status, 200, 'a live subscriber');
$pg->broadcast('inf', "early $pad");
q1("INSERT INTO $q (message, enqueued_at) VALUES (jsonb_build_object('html', 'inf $pad'), 'infinity')");
q1("INSERT INTO $q (message, enqueued_at) VALUES (jsonb_build_object('html', 'ninf $pad'), '-infinity')");
$pg->broadcast('inf', "late $pad");
ok($live->wait_for_data_events(4, 15), 'the live subscriber gets all four rows');
is_deeply([ datas($live) ], [ map { "$_ $pad" } qw(early inf ninf late) ], '... in order');
my $all = $pg->open_stream('inf', query => 'replay=all');
ok($all->wait_for_data_events(4, 15), 'replay=all gets them too');
is_deeply([ datas($all) ], [ map { "$_ $pad" } qw(early inf ninf late) ], '... the rows around the infinite ones included');
$pg->broadcast('inf', "after $pad");
ok($live->wait_for_data_events(5, 10) && $all->wait_for_data_events(5, 10), 'and the stream goes on');

# ---- a row that cannot be read ----
q1('CREATE EXTENSION pg_surgery');
$pg->create_stream('corrupt');
my $qc = 'pgbus_stream.q_pgbus_corrupt';
my $toast = q1("SELECT reltoastrelid::regclass FROM pg_class WHERE oid = '$qc'::regclass");
my $watch = $pg->open_stream('corrupt');
$pg->broadcast('corrupt', "c1 $pad");
# A value stored out of line, whose chunks are gone before the commit.
my $bad = q1("BEGIN;
	INSERT INTO $qc (message) SELECT jsonb_build_object('html',
	  (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 3000) g)) RETURNING msg_id \\gset
	SELECT heap_force_kill('$toast', array_agg(ctid)) FROM $toast \\g /dev/null
	COMMIT;
	SELECT :msg_id");
like($bad, qr/^\d+$/, "a row whose TOAST value is gone (msg_id $bad)");
like(err_of("SELECT message FROM $qc WHERE msg_id = $bad") // '', qr/missing chunk/,
	'reading it fails for its data');
$pg->broadcast('corrupt', "c3 $pad");
ok($watch->wait_for_data_events(2, 15), 'the live subscriber gets the rows around it');
is_deeply([ datas($watch) ], [ "c1 $pad", "c3 $pad" ], '... both of them, in order');
ok($watch->wait_until(sub { gaps($_[0]) }, 10), 'and a gap notice');
like((gaps($watch))[0] // '', qr/"reason":"unreadable","ids":\[$bad\]/, "... naming row $bad as unreadable");
my $replay = $pg->open_stream('corrupt', query => 'replay=all');
ok($replay->wait_for_data_events(2, 15), 'replay=all gets the rows around it');
is_deeply([ datas($replay) ], [ "c1 $pad", "c3 $pad" ], '... both');
like((gaps($replay))[0] // '', qr/"reason":"unreadable","ids":\[$bad\]/, '... and the same notice');
$pg->broadcast('corrupt', "c4 $pad");
ok($watch->wait_for_data_events(3, 10), 'the stream goes on');
cmp_ok(q1(q{SELECT failed FROM pgbus_stream.stats() WHERE stream = 'corrupt'}), '>=', 1,
	'stats().failed counts the skipped row');
my @warned = grep { /row $bad cannot be read and is skipped/ } split /\n/, slurp_file($pg->logfile);
is(scalar @warned, 1, 'warned about once') or diag(join("\n", @warned));

# ---- explicit ids above the sequence ----
$pg->create_stream('jam');
my $qj = 'pgbus_stream.q_pgbus_jam';
q1("CREATE ROLE producer LOGIN; GRANT USAGE ON SCHEMA pgbus_stream TO producer;
	GRANT INSERT ON $qj TO producer");
my $j = $pg->open_stream('jam');
my $j1 = $pg->broadcast('jam', 'j1');
for my $id ('9223372036854775807', $j1 + 1000)
{
	like(err_of("INSERT INTO $qj (msg_id, message) OVERRIDING SYSTEM VALUE VALUES ($id, '{\"html\":\"bad\"}')") // '',
		qr/msg_id $id is above $j1, the last value of the sequence of queue table "q_pgbus_jam"/,
		"explicit msg_id $id above the sequence: refused with the reason");
	like(err_of("INSERT INTO $qj (msg_id, message) OVERRIDING SYSTEM VALUE VALUES ($id, '{}')", 'producer') // '',
		qr/is above/, '... also for a producer with INSERT only');
}
my $j2 = $pg->broadcast('jam', 'j2');
ok($j2 > $j1, 'a superuser broadcasts after them');
is(err_of(q{SELECT pgbus_stream.broadcast('jam', 'j3')}, 'producer'), undef, 'and so does the producer');
is(err_of("INSERT INTO $qj (message) VALUES ('{\"html\":\"j4\"}')", 'producer'), undef,
	'a plain insert too');
ok($j->wait_for_data_events(4, 10), 'every accepted row arrives');
is_deeply([ datas($j) ], [qw(j1 j2 j3 j4)], '... in order');

$pg->finish;
done_testing();
