# 063_gem_hook_race: the first subscription to an auto-attached queue puts
# its capture triggers on while producers are writing.
#
# Three producers send 400 messages each into a gem queue (one pgmq.send per
# transaction); when a few hundred are in, a client subscribes with
# ?since=0. The worker hooks the queue under load; the client must get every
# message exactly once, each producer's in its order: those committed before
# the triggers from the table, the others live.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use IPC::Run;
use PgbusNode;

my $per = 400;
my $pg = PgbusNode->new('gemhook', extension => 0, bearer_all => 1);
$pg->safe_psql('postgres', slurp_file("$FindBin::Bin/../lib/pgmq_fixture.sql"));
$pg->safe_psql('postgres', 'CREATE EXTENSION pgbus_stream');
$pg->safe_psql('postgres', q{SELECT pgmq.create('pgbus_race_1_messages')});
my $triggers = q{SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pgmq.q_pgbus_race_1_messages'::regclass};
is($pg->safe_psql('postgres', $triggers), '0', 'not hooked before the first subscription');

my $dir = PostgreSQL::Test::Utils::tempdir();
my $connstr = $pg->connstr('postgres');
my (@h, @out, @err);
for my $p (1 .. 3)
{
	my $file = "$dir/producer$p.sql";
	open my $fh, '>', $file or die "$file: $!";
	# paced (about 2 s in all) so that the subscription lands among the writes
	print $fh "SELECT pgmq.send('pgbus_race_1_messages', jsonb_build_object('html', 'p$p-$_'));"
	  . ($_ % 10 == 0 ? " SELECT pg_sleep(0.05);\n" : "\n")
	  for 1 .. $per;
	close $fh;
	push @h,
	  IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $connstr, '-f', $file ],
		'>', \$out[$p], '2>', \$err[$p], IPC::Run::timeout(120));
}
my $deadline = time + 60;
sleep 0.02
  while time < $deadline
  && $pg->safe_psql('postgres', 'SELECT count(*) FROM pgmq.q_pgbus_race_1_messages') < 150;
my $c = $pg->open_stream('race_1_messages', query => 'since=0');
is($c->status, 200, 'subscribed while the producers write');
my $at_subscribe = $pg->safe_psql('postgres', 'SELECT count(*) FROM pgmq.q_pgbus_race_1_messages');
for my $p (1 .. 3)
{
	my $ok = eval { $h[ $p - 1 ]->finish };
	ok($ok, "producer $p finished") or diag($@ // '', $err[$p] // '');
}
note "$at_subscribe of " . 3 * $per . ' rows were in the queue at the subscription';
cmp_ok($at_subscribe, '<', 3 * $per, 'the subscription came while producers were still writing');
is($pg->safe_psql('postgres', $triggers), '1', 'hooked by the subscription');

ok($c->wait_for_data_events(3 * $per, 30), 'every message arrives');
$c->poll(0.5);
my @got = map { $_->{data} } $c->data_events;
my %seen;
my @dups = grep { $seen{$_}++ } @got;
is(scalar @got, 3 * $per, 'as many frames as messages');
is(scalar @dups, 0, 'none twice') or diag("first duplicates: @dups[0 .. ($#dups < 4 ? $#dups : 4)]");
for my $p (1 .. 3)
{
	my @mine = map { /^p$p-(\d+)$/ ? $1 : () } @got;
	is_deeply(\@mine, [ 1 .. $per ], "producer $p: all of its messages, in its order");
}
$c->close;

$pg->finish;
done_testing();
