#!/usr/bin/env perl
# test/lint/citations.pl: every mention of docs/ARCHITECTURE.md in the
# sources (src/, test/, bench/, sql/) cites a part of it that exists, in one
# form:
#
#     docs/ARCHITECTURE.md, "Heading"
#
# The quoted text may wrap across comment lines. It names a heading of the
# file ("## Heading") or a paragraph's bold run-in title ("**Heading.**").
# A mention without a quoted part, or citing one that does not exist, fails
# with its file and line. Run by test/run_all.sh (stage checks).
use strict;
use warnings;

my $repo = $ARGV[0] // '.';
chdir $repo or die "citations: cannot enter $repo: $!\n";
my $doc = 'docs/ARCHITECTURE.md';
open my $fh, '<', $doc or die "citations: cannot read $doc: $!\n";
my %parts;
while (<$fh>) {
	$parts{$1} = 1 if /^#{2,4}\s+(.+?)\s*$/;
	$parts{$1} = 1 while /\*\*([^*]+?)\.\*\*/g;
}
close $fh;

my @files;
if (system('git rev-parse --git-dir >/dev/null 2>&1') == 0) {
	@files = split /\0/, `git ls-files -z -co --exclude-standard -- src test bench sql`;
} else {
	@files = split /\n/, `find src test bench sql -type f`;
}
@files = grep { -f $_ && !m{^test/lint/} && !m{(^|/)tmp_check/} && !m{/output/} && m{(\.(cpp|hpp|h|c|pl|pm|sh|sql|js|py)|Makefile)$} } @files;

my ($bad, $seen) = (0, 0);
for my $f (@files) {
	open my $in, '<', $f or next;
	my @lines = <$in>;
	close $in;
	my $text = join '', @lines;
	next unless $text =~ /ARCHITECTURE/;
	# One stream of text per file: a line's comment leader (//, #, --, *)
	# joins it to the line before, so a wrapped citation reads whole.
	my $joined = '';
	my @line_at; # offset in $joined -> line number
	for my $i (0 .. $#lines) {
		my $l = $lines[$i];
		chomp $l;
		if ($i > 0) {
			$l =~ s{^\s*(//+|#+|--|\*)\s?}{};
			$joined .= ' ';
		}
		push @line_at, [length($joined), $i + 1];
		$joined .= $l;
	}
	my $line_of = sub {
		my $off = shift;
		my $n = 1;
		for (@line_at) { last if $_->[0] > $off; $n = $_->[1] }
		return $n;
	};
	while ($joined =~ /ARCHITECTURE/g) {
		my $at = $-[0];
		$seen++;
		my $rest = substr($joined, $at > 5 ? $at - 5 : 0);
		if ($rest =~ m{^docs/ARCHITECTURE\.md, \\?"((?:[^"\\]|\\[^"])+?)\s*\\?"}) {
			(my $part = $1) =~ s/\s+/ /g;
			next if $parts{$part};
			printf "%s:%d: cites %s, \"%s\", which has no such heading or run-in title\n", $f, $line_of->($at), $doc, $part;
		} else {
			printf "%s:%d: mentions ARCHITECTURE without citing a part of it as %s, \"Heading\"\n", $f, $line_of->($at), $doc;
		}
		$bad++;
	}
}
print "citations: $seen citation(s) of $doc checked, $bad wrong\n";
exit($bad ? 1 : 0);
