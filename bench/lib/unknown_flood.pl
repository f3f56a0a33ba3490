#!/usr/bin/perl
# Requests for made-up stream names at a fixed rate, one after the other
# (each waits for its answer, so a slow refusal shows as a lower achieved
# rate), for bench/unknown_flood.sh. Bounded: --rate x --seconds requests at
# most, and it stops --seconds + 5 s after it started whatever happened.
#   perl unknown_flood.pl --port P [--rate 300] [--seconds 10] [--kind anon|jwt] [--token T]
# Prints one JSON object: sent, answered, statuses, achieved rate.
use strict;
use warnings;
use Getopt::Long;
use IO::Socket::INET;
use IO::Select;
use Time::HiRes qw(time sleep);

my ($port, $rate, $seconds, $kind, $token) = (undef, 300, 10, 'anon', '');
GetOptions('port=i' => \$port, 'rate=i' => \$rate, 'seconds=i' => \$seconds,
	'kind=s' => \$kind, 'token=s' => \$token)
  or die "usage: $0 --port P [--rate R] [--seconds S] [--kind anon|jwt] [--token T]\n";
die "--port is required\n" unless $port;
die "--rate 1..5000, --seconds 1..120\n" unless $rate >= 1 && $rate <= 5000 && $seconds >= 1 && $seconds <= 120;

my $total = $rate * $seconds;
my $start = time;
my $hard_stop = $start + $seconds + 5;
my ($sent, $answered) = (0, 0);
my %status;
for my $i (0 .. $total - 1)
{
	my $due = $start + $i / $rate;
	my $now = time;
	last if $now > $hard_stop;
	sleep($due - $now) if $due > $now;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp', Timeout => 2)
	  or next;
	my $auth = $kind eq 'jwt' ? "Authorization: Bearer $token\r\n" : '';
	print $s "GET /streams/made_up_${$}_$i HTTP/1.1\r\nHost: 127.0.0.1\r\n${auth}Connection: close\r\n\r\n";
	$sent++;
	my $buf = '';
	my $sel = IO::Select->new($s);
	my $until = time + 2;
	while (time < $until && $sel->can_read($until - time))
	{
		my $n = sysread($s, $buf, 4096, length $buf);
		last unless $n;
		last if $buf =~ /\r\n\r\n/; # the head is enough: refusals are short
	}
	if ($buf =~ m{^HTTP/1\.[01] (\d{3})})
	{
		$answered++;
		$status{$1}++;
	}
	close $s;
}
my $elapsed = time - $start;
printf '{"sent":%d,"answered":%d,"achieved_rate":%.1f,"statuses":{%s}}' . "\n", $sent, $answered,
  $elapsed > 0 ? $answered / $elapsed : 0, join(',', map { qq{"$_":$status{$_}} } sort keys %status);
