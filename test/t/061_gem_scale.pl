# 061_gem_scale: 10 000 of the gem's per-record queues.
#
# 5 000 queues exist before CREATE EXTENSION (hooked by it), 5 000 more are
# made by pgmq.create afterwards (hooked by the event trigger), named as the
# gem names per-record streams. Then 20 subscribers on 20 of them and one
# broadcast into each of 40 queues (the 20 watched and 20 others): each
# subscriber gets exactly its own message. Times are printed as notes (speed
# targets live in bench/, not here).
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use PgbusNode;

my $half = 5000;
my $pg = PgbusNode->new('gemscale', extension => 0, bearer_all => 1, timeout => 120,
	conf => "max_locks_per_transaction = 256\nfsync = off\n");
$pg->safe_psql('postgres', slurp_file("$FindBin::Bin/../lib/pgmq_fixture.sql"));
# The gem's queue for record i: queue_name('ai_chat_<i>:messages').
$pg->safe_psql('postgres', q{
CREATE PROCEDURE make_queues(first int, last int) LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN first..last LOOP
    PERFORM pgmq.create('pgbus_ai_chat_' || i || '_messages');
    IF i % 250 = 0 THEN COMMIT; END IF;
  END LOOP;
END $$});

my $t0 = time;
$pg->safe_psql('postgres', "CALL make_queues(1, $half)");
my $t_plain = time - $t0;
$t0 = time;
$pg->safe_psql('postgres', 'CREATE EXTENSION pgbus_stream');
my $t_ext = time - $t0;
is($pg->safe_psql('postgres', 'SELECT count(*) FROM pgbus_stream.streams WHERE auto_attached'),
	$half, "CREATE EXTENSION hooked the $half queues that existed");
$t0 = time;
$pg->safe_psql('postgres', 'CALL make_queues(' . ($half + 1) . ', ' . (2 * $half) . ')');
my $t_hooked = time - $t0;
is($pg->safe_psql('postgres', 'SELECT count(*) FROM pgbus_stream.streams WHERE auto_attached'),
	2 * $half, "pgmq.create hooked the $half made afterwards");
is($pg->safe_psql('postgres', q{SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
                                  JOIN pg_namespace n ON n.oid = c.relnamespace
                                 WHERE n.nspname = 'pgmq' AND t.tgname LIKE 'pgbus_stream_%'}),
	0, 'no triggers before anyone subscribes');
note sprintf('%d queues: pgmq.create without the extension %.1f ms each, with auto-attach %.1f ms each; '
	  . 'CREATE EXTENSION over %d queues %.1f s',
	$half, 1000 * $t_plain / $half, 1000 * $t_hooked / $half, $half, $t_ext);

my @watched = map { 1 + int($_ * (2 * $half - 1) / 19) } 0 .. 19;    # spread over both halves
my %w = map { $_ => 1 } @watched;
my @others = grep { !$w{$_} } map { 7 + 487 * $_ } 0 .. 19;
my %client;
$t0 = time;
for my $i (@watched)
{
	my $c = $pg->open_stream("ai_chat_${i}_messages");
	is($c->status, 200, "subscribed to ai_chat_${i}_messages") or next;
	$client{$i} = $c;
}
note sprintf('20 subscriptions in %.2f s', time - $t0);
is($pg->safe_psql('postgres', q{SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
                                  JOIN pg_namespace n ON n.oid = c.relnamespace
                                 WHERE n.nspname = 'pgmq' AND t.tgname LIKE 'pgbus_stream_%'}),
	20, 'the 20 watched queues got their capture trigger');
$t0 = time;
$pg->safe_psql('postgres', join(";\n",
		map { "SELECT pgmq.send('pgbus_ai_chat_${_}_messages', '{\"html\": \"record $_\"}')" }
		  (@watched, @others)));
note sprintf('40 sends in %.2f s', time - $t0);
for my $i (@watched)
{
	my $c = $client{$i} or next;
	$c->wait_for_data_events(1, 15);
	$c->poll(0.2);
	is_deeply([ map { $_->{data} } $c->data_events ], ["record $i"], "ai_chat_${i}_messages got its message once");
	$c->close;
}

$pg->finish;
done_testing();
