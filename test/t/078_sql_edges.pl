# 078_sql_edges: what the SQL functions say, and to whom.
#
# An error quotes at most 64 bytes of an argument (a 10 MB name costs its
# error about 100 bytes, in the client's message and in the server log).
# _broadcast_target (what broadcast() looks up) tells a role without INSERT
# on a private stream's queue nothing, not even that it exists, nor its id
# or queue; a public stream's says "permission denied". broadcast() returns
# the msg_id of its row also on a stream auto_attach made and no one has
# subscribed to yet (its queue not hooked).
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use PgbusNode qw(sql_literal);

my $pg = PgbusNode->new('sqledges', extension => 0);
$pg->safe_psql('postgres', slurp_file("$FindBin::Bin/../lib/pgmq_fixture.sql"));
$pg->safe_psql('postgres', 'CREATE EXTENSION pgbus_stream');

sub q1 { return $pg->safe_psql('postgres', $_[0]) }

sub err_of
{
	my ($sql, $user) = @_;
	my ($rc, $out, $err) =
	  $pg->psql('postgres', $sql, $user ? (extra_params => [ '-U', $user ]) : ());
	return $rc == 0 ? undef : $err;
}

# ---- errors quote a capped part of their argument ----
my $log_before = -s $pg->logfile;
my $huge = "repeat('a', 10485760)"; # (the statement itself stays short in the log)
for my $call ("pgbus_stream.queue_name($huge)", "pgbus_stream.broadcast($huge, 'x')",
	"pgbus_stream.create_stream($huge)", "pgbus_stream.attach($huge)",
	"pgbus_stream.presence($huge)", "pgbus_stream.detach($huge)")
{
	(my $shown = $call) =~ s/repeat\('a', 10485760\)/<10 MB>/;
	my $e = err_of("SELECT $call") // '';
	like($e, qr/ERROR:  pgbus_stream: /, "$shown: an error");
	cmp_ok(length($e), '<', 600, "$shown: the message is short (" . length($e) . ' bytes)');
	like($e, qr/a{64}\.\.\. \(10485760 bytes\)/, '... it shows the start of the name and its size');
}
cmp_ok((-s $pg->logfile) - $log_before, '<', 20000, 'the server log grew by little');

# ---- _broadcast_target and private streams ----
q1(q{SELECT pgbus_stream.create_stream('secret', public => false)});
q1(q{SELECT pgbus_stream.create_stream('open', public => true)});
q1(q{CREATE ROLE outsider LOGIN; GRANT USAGE ON SCHEMA pgbus_stream TO outsider;
	CREATE ROLE writer LOGIN; GRANT USAGE ON SCHEMA pgbus_stream TO writer;
	GRANT INSERT ON pgbus_stream.q_pgbus_secret TO writer});
my $missing = err_of(q{SELECT * FROM pgbus_stream._broadcast_target('no_such')}, 'outsider') // '';
my $private = err_of(q{SELECT * FROM pgbus_stream._broadcast_target('secret')}, 'outsider') // '';
like($missing, qr/stream "no_such" does not exist/, 'an unknown stream: does not exist');
like($private, qr/stream "secret" does not exist/, 'a private stream, no INSERT on its queue: does not exist');
unlike($private, qr/q_pgbus_secret|\d{2,}/, '... no queue, no id');
like(err_of(q{SELECT pgbus_stream.broadcast('secret', 'x')}, 'outsider') // '', qr/does not exist/,
	'broadcast() says the same');
like(err_of(q{SELECT * FROM pgbus_stream._broadcast_target('open')}, 'outsider') // '',
	qr/permission denied to broadcast to stream "open"/, 'a public stream: permission denied');
is(err_of(q{SELECT * FROM pgbus_stream._broadcast_target('secret')}, 'writer'), undef,
	'a role with INSERT on the queue gets the target');
my ($rc, $id) = $pg->psql('postgres', q{SELECT pgbus_stream.broadcast('secret', 'w')},
	extra_params => [ '-U', 'writer' ]);
ok($rc == 0 && $id > 0, "and broadcasts ($id)");

# ---- broadcast() on an auto-attached queue not hooked yet ----
my $queue = q1(q{SELECT pgbus_stream.queue_name('room_7:messages')});
q1("SELECT pgmq.create('$queue')");
my $stream = q1("SELECT name FROM pgbus_stream.streams WHERE queue_name = '$queue'");
ok($stream ne '', "auto_attach made stream $stream");
is(q1("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pgmq.q_$queue'::regclass AND NOT tgisinternal"),
	'0', 'its queue is not hooked yet (no subscriber)');
my $id1 = q1(q{SELECT pgbus_stream.broadcast('room_7:messages', 'one')});
my $id2 = q1(q{SELECT pgbus_stream.broadcast('room_7:messages', 'two')});
is($id1, q1("SELECT min(msg_id) FROM pgmq.q_$queue"), "broadcast() returns the first row's msg_id ($id1)");
is($id2, q1("SELECT max(msg_id) FROM pgmq.q_$queue"), "and the second's ($id2)");
ok($id1 > 0 && $id2 > $id1, 'neither is 0');

$pg->finish;
done_testing();
