# 083_horizon_hold: a transaction left open does not hold up live delivery.
#
# One session inserts a row and leaves its transaction open (it holds the
# stream's horizon below its id). Meanwhile other sessions commit 300 rows,
# with a rolled-back insert (a whole transaction, or a savepoint) between
# every two commits. A rolled-back id is known to be gone at once (its
# abort is recorded in the ring), so the only hole the live client's
# tokens must name is the open transaction's id: every commit reaches it
# while the transaction stays open, none is held back. When the open
# transaction commits, its row arrives with its own id, after the others.
# A reconnect with any token the client received gets exactly what it
# missed (paged in msg_id order, so the late row comes first). An explicit id equal to a rolled-back one is refused (tokens
# already cover it).
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use PgbusNode qw(sql_literal ids_ok token_covers);
use PsqlSession;

my $pg = PgbusNode->new('hold');
my $epoch = $pg->create_stream('hold');
my $q = 'pgbus_stream.q_pgbus_hold';

sub q1 { return $pg->safe_psql('postgres', $_[0]) }
sub datas { return map { $_->{data} // '' } $_[0]->data_events }
sub held_back { return q1('SELECT coalesce(sum(held_back), 0) FROM pgbus_stream.workers()') }

my $live = $pg->open_stream('hold');
is($live->status, 200, 'a live subscriber');
my $first = $pg->broadcast('hold', 'first');
ok($live->wait_for_data_events(1, 10), 'it gets a first row');

# ---- an open transaction, rollbacks between the commits ----
my $open = psql_session($pg);
session_query($open, 'BEGIN');
my $open_id = session_query($open, "SELECT pgbus_stream.broadcast('hold', 'open')");
chomp $open_id;
like($open_id, qr/^\d+$/, "a transaction inserted row $open_id and stays open");

my $n = 300;
my @script;
for my $i (1 .. $n)
{
	push @script, "SELECT pgbus_stream.broadcast('hold', 'c$i');";
	if ($i % 2)
	{
		push @script, "BEGIN; SELECT pgbus_stream.broadcast('hold', 'r$i'); ROLLBACK;";
	}
	else
	{
		# A savepoint rolled back inside a transaction that commits nothing else.
		push @script, "BEGIN; SAVEPOINT s; SELECT pgbus_stream.broadcast('hold', 'r$i');"
		  . ' ROLLBACK TO SAVEPOINT s; COMMIT;';
	}
}
q1(join("\n", @script));
# The last thing the stream saw is a rollback: its id is above every committed one.
my $gone = q1("BEGIN; SELECT pgbus_stream.broadcast('hold', 'gone'); ROLLBACK;");
my $last = q1("SELECT max(msg_id) FROM $q");
cmp_ok($gone, '>', $last, "id $gone was rolled back after the last commit");
cmp_ok($last - $first, '>=', 2 * $n, "$n commits, $n rollbacks between them (ids up to $last)");

ok($live->wait_for_data_events(1 + $n, 30), "every one of the $n commits reaches the live client while the transaction is open")
  or diag('got ' . scalar($live->data_events) . ' rows; held_back ' . held_back());
is_deeply([ datas($live) ], [ 'first', map { "c$_" } 1 .. $n ], '... in commit order, nothing else');
is(held_back(), 0, 'no id was held back');
my ($rc, $out, $err) = $pg->psql('postgres',
	"INSERT INTO $q (msg_id, message) OVERRIDING SYSTEM VALUE VALUES ($gone, '{\"html\":\"again\"}')");
like($err, qr/msg_id $gone is not above/,
	'an explicit insert of the rolled-back id is refused (tokens may cover it already)');
my @frames = $live->data_events;
my $tok = $frames[-1]{id};
cmp_ok(length $tok, '<', 64, "the last token is short ($tok)");
ok(!token_covers($tok, $open_id), '... and does not cover the open id');

# ---- the open transaction ends ----
session_query($open, 'COMMIT');
session_end($open);
ok($live->wait_for_data_events(2 + $n, 15), 'the open row arrives when its transaction commits');
@frames = $live->data_events;
is($frames[-1]{data}, 'open', '... after the rows committed before it');
ok(token_covers($frames[-1]{id}, $open_id), '... with a token that covers its id');
my @msg_ids = ($first, map { q1("SELECT msg_id FROM $q WHERE message->>'html' = 'c$_'") } 1 .. $n);
ids_ok(\@frames, [ @msg_ids, $open_id ], undef, 'live');

# ---- reconnects stay exact ----
for my $at (0, 150, $n)
{
	my $c = $pg->open_stream('hold', headers => { 'Last-Event-ID' => $frames[$at]{id} });
	# Pages come in msg_id order: the open row's id is below the others.
	my $want = [ 'open', map { "c$_" } $at + 1 .. $n ];
	ok($c->wait_for_data_events(scalar @$want, 15), "a reconnect after frame $at gets the rest");
	$c->poll(0.3);
	is_deeply([ datas($c) ], $want, '... exactly once, nothing before');
	$c->close;
}
$pg->broadcast('hold', 'after');
ok($live->wait_for_data_events(3 + $n, 10), 'the stream goes on');
my $after = ($live->data_events)[-1]{id};
like($after, qr/^$epoch~\d+$/, "and once nothing is in flight the token is the horizon alone ($after)");

$live->close;
$pg->finish;
done_testing();
