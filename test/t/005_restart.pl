# 005_restart: the worker dies and comes back; nothing is lost.
#
# A. kill -9 of the worker (the postmaster then restarts every backend, and
#    logs "terminated by signal 9" for the worker: that single line is the
#    expected one, any other such line fails the test). Broadcasts made
#    while it is gone arrive when the client reconnects with its last id.
# B. SIGTERM: a clean stop sends "event: pgbus:shutdown" to subscribers, the
#    worker is restarted, producers never block meanwhile, and a reconnect
#    with the last id gets exactly what was missed.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();
use PgbusNode qw(frames_ok token_covers);

# The test framework turns restart_after_crash off; a bgworker crash must
# restart the server here, as it does by default.
my $pg = PgbusNode->new('restart', conf => "restart_after_crash = on\n");
$pg->create_stream('ev');

sub msg { my ($d) = @_; return [ $pg->broadcast('ev', $d), $d ] }

# ---------------------------------------------------------------- A
my $c = $pg->open_stream('ev');
is($c->status, 200, 'connected');
my ($W) = $c->body =~ /since_id=(\S+)/;
my @m = map { msg("before crash $_") } 1 .. 3;
ok($c->wait_for_data_events(3, 10), 'three messages before the crash');
frames_ok([ $c->data_events ], \@m, $W, 'before crash');
my $last = ($c->data_events)[-1]{id};

my @pids = $pg->worker_pids;
is(scalar @pids, 1, "one worker running (pid @pids)");
$pg->expect_kill($pids[0], 9);
ok(kill('KILL', $pids[0]), "kill -9 $pids[0]");

ok($c->wait_closed(20), 'the SSE connection ends with the worker');
$c->close;

# Wait for crash recovery, then write while the new worker may not be up yet.
ok($pg->poll_query_until('postgres', 'SELECT true'), 'server accepts queries again after the crash');
my @missed = map { msg("during restart $_") } 1 .. 2;
my @new = $pg->wait_workers(1, exclude => \@pids);
ok(@new, "a new worker runs (pid @new)");
ok($pg->wait_http_ready(30), 'listener is back');

$c = $pg->open_stream('ev', headers => { 'Last-Event-ID' => $last });
is($c->status, 200, 'reconnect with the last id after the crash');
ok($c->wait_for_data_events(2, 15), 'messages broadcast meanwhile arrive');
$c->poll(1);
frames_ok([ $c->data_events ], \@missed, $last, 'after crash, replay');
push @missed, msg('live after crash');
ok($c->wait_for_data_events(3, 10), 'live delivery resumes');
frames_ok([ $c->data_events ], \@missed, $last, 'after crash, replay then live');
$last = ($c->data_events)[-1]{id};

# ---------------------------------------------------------------- B
@pids = $pg->worker_pids;
is(scalar @pids, 1, "one worker running (pid @pids)");
$pg->expect_exit($pids[0], 1);
ok(kill('TERM', $pids[0]), "SIGTERM $pids[0]");
ok($c->wait_until(sub { grep { ($_->{event} // '') eq 'pgbus:shutdown' } $_[0]->events }, 10),
	'clean stop: pgbus:shutdown event');
ok($c->wait_closed(10), 'clean stop: connection closed');
$c->close;

# Producers do not wait for the worker.
my @down;
my $t0 = Time::HiRes::time();
push @down, msg("while stopped $_") for 1 .. 3;
my $dt = Time::HiRes::time() - $t0;
ok($dt < 5, sprintf('three broadcasts while the worker is down took %.3f s', $dt));

@new = $pg->wait_workers(1, exclude => \@pids);
ok(@new, "the worker is restarted (pid @new)");
ok($pg->wait_http_ready(30), 'listener is back');
$c = $pg->open_stream('ev', headers => { 'Last-Event-ID' => $last });
is($c->status, 200, 'reconnect with the last id after the clean stop');
ok($c->wait_for_data_events(3, 15), 'messages broadcast while stopped arrive');
$c->poll(1);
frames_ok([ $c->data_events ], \@down, $last, 'after clean stop, replay');
$c->close;

# The whole history from the start, once more.
$c = $pg->open_stream('ev', query => "since=$W");
ok($c->wait_for_data_events(9, 15), 'full replay after both restarts');
$c->poll(1);
frames_ok([ $c->data_events ], [ @m, @missed, @down ], $W, 'full replay');
$c->close;

$pg->finish;
done_testing();
