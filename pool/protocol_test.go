package pool

import (
	"fmt"
	"strings"
	"testing"
)

// An exhaustive small-scope check of the publish and collect protocol of
// doc.go: every interleaving of one host's publishes, one collector's
// rounds and the events that can fall between their steps (a lease
// expiry, a name removed, the collector's death) is explored, and in every
// state each name must reach only objects that exist. The same checker
// must find a violation in each variant that drops one rule of the
// protocol, so that it is known to be able to fail.

// objs is a set of objects (bit i: object i).
type objs uint8

func (s objs) String() string {
	var b []string
	for i := range 8 {
		if s&(1<<i) != 0 {
			b = append(b, fmt.Sprint(i))
		}
	}
	return "{" + strings.Join(b, ",") + "}"
}

// The scope. Objects: 0 is reached by name a; 1 exists but no name
// reaches it (an orphan, older than any grace); 2 does not exist yet.
// Names: a (0), b (1), c (2). The host publishes b = {1, 2} (reusing
// the orphan it saw, uploading 2), then c = {0, 2} (reusing a's object,
// which a user may remove meanwhile, and its own upload).
const (
	nameA, nameB, nameC = 0, 1, 2
	initialObjects      = objs(1<<0 | 1<<1)
)

type publish struct {
	name int
	want objs
}

var publishes = []publish{{nameB, 1<<1 | 1<<2}, {nameC, 1<<0 | 1<<2}}

// variant drops one rule of the protocol (ruleAll drops none).
type variant int

const (
	ruleAll           variant = iota
	trustKnown                // reuse what the host knew to exist, without HEAD under the key
	verifyBeforeKey           // verify reused objects before the publish key exists
	noSecondMark              // the collector skips its marking after the wait
	noWait                    // the collector does not wait for publish keys
	publishWithoutKey         // the publish transaction does not require the key
	noFence                   // a publish may start while a sweep is fenced
)

func (v variant) String() string {
	return [...]string{"the protocol", "trust known objects", "verify before the key",
		"no second marking", "no wait for publish keys", "publish without the key", "no fence"}[v]
}

// state is one state of the system; comparable, so that it keys the set
// of visited states.
type state struct {
	exists objs
	names  [3]objs
	named  uint8 // bit n: name n exists
	key    bool  // the host's publish key exists
	fence  bool

	// The host.
	pub      uint8 // index of the publish under way; len(publishes): done
	pubPC    uint8
	verified objs // uploaded or HEAD-verified (trustKnown: believed) in this try
	known    objs // what the host believes exists
	expired  bool // the host's one lease expiry has happened

	removed bool // the user's one removal of name a has happened

	// The collector.
	round uint8 // rounds done; 2: done
	colPC uint8
	mark  objs
	died  bool // the collector's one death has happened
}

// Host steps.
const (
	pubStart  = iota // create the publish key (verifyBeforeKey: after verifying)
	pubVerify        // one reused or new object per step
	pubSet           // the publish transaction
	pubDone          // delete the key
)

// Collector steps.
const (
	colMark = iota
	colFence
	colWait
	colMark2
	colSweep
	colUnfence
)

func (s state) reach() objs {
	var r objs
	for n := range s.names {
		if s.named&(1<<n) != 0 {
			r |= s.names[n]
		}
	}
	return r
}

// violation says which name reaches a missing object, or "".
func (s state) violation() string {
	for n := range s.names {
		if s.named&(1<<n) != 0 && s.names[n]&^s.exists != 0 {
			return fmt.Sprintf("name %c reaches %v, missing from %v", 'a'+n, s.names[n], s.exists)
		}
	}
	return ""
}

// next returns every state one step of any actor leads to, each with a
// description of the step.
func (s state) next(v variant) (out []state, steps []string) {
	add := func(t state, what string) { out, steps = append(out, t), append(steps, what) }

	// The host.
	if int(s.pub) < len(publishes) {
		p := publishes[s.pub]
		t := s
		switch s.pubPC {
		case pubStart:
			if v == verifyBeforeKey && s.verified != p.want {
				t.verifyOne(p.want, v)
				add(t, "host verifies before its key")
				break
			}
			if s.fence && v != noFence {
				break // blocked
			}
			t.key = true
			if v == verifyBeforeKey {
				t.pubPC = pubSet
			} else {
				t.pubPC, t.verified = pubVerify, 0
			}
			add(t, "host creates its publish key")
		case pubVerify:
			t.verifyOne(p.want, v)
			if t.verified == p.want {
				t.pubPC = pubSet
			}
			add(t, "host verifies or uploads an object")
		case pubSet:
			if s.key || v == publishWithoutKey {
				t.names[p.name] = p.want
				t.named |= 1 << p.name
				t.pubPC = pubDone
				add(t, fmt.Sprintf("host publishes %c", 'a'+p.name))
			} else {
				t.pubPC, t.verified = pubStart, 0 // lease lost: again, new lease
				add(t, "host's publish fails: key gone; it retries")
			}
		case pubDone:
			t.key = false
			t.known |= p.want
			t.pub++
			t.pubPC, t.verified = pubStart, 0
			add(t, "host deletes its publish key")
		}
	}
	// The host's lease expires (once): etcd drops its key.
	if s.key && !s.expired {
		t := s
		t.key, t.expired = false, true
		add(t, "host's lease expires")
	}
	// A user removes name a (once).
	if !s.removed && s.named&(1<<nameA) != 0 {
		t := s
		t.named &^= 1 << nameA
		t.removed = true
		add(t, "user removes a")
	}

	// The collector.
	if s.round < 2 {
		t := s
		switch s.colPC {
		case colMark:
			t.mark = s.reach()
			t.colPC = colFence
			add(t, "collector marks")
		case colFence:
			t.fence = true
			t.colPC = colWait
			add(t, "collector fences")
		case colWait:
			if !s.key || v == noWait {
				t.colPC = colMark2
				add(t, "collector's wait ends")
			}
		case colMark2:
			if v != noSecondMark {
				t.mark |= s.reach()
			}
			t.colPC = colSweep
			add(t, "collector marks again")
		case colSweep:
			t.exists &= t.mark
			t.colPC = colUnfence
			add(t, fmt.Sprintf("collector sweeps all but %v", t.mark))
		case colUnfence:
			t.fence = false
			t.round++
			t.colPC = colMark
			add(t, "collector removes its fence")
		}
		// The collector dies (once) while fenced: its lease takes the
		// fence; another is elected and starts the round again.
		if s.fence && !s.died {
			t := s
			t.fence, t.died = false, true
			t.colPC = colMark
			add(t, "collector dies")
		}
	}
	return out, steps
}

// verifyOne takes the lowest object of want not yet verified in this try:
// HEAD it, uploading it if it is missing (trustKnown: believe the host's
// knowledge instead).
func (s *state) verifyOne(want objs, v variant) {
	rest := want &^ s.verified
	o := rest & -rest
	switch {
	case v == trustKnown && s.known&o != 0:
	case s.exists&o != 0:
	default:
		s.exists |= o // uploaded
		s.known |= o
	}
	s.verified |= o
}

// check explores every state reachable from the start and returns the
// number of states, and a trace to the first violation found ("" if none).
func check(v variant) (int, string) {
	start := state{exists: initialObjects, named: 1 << nameA, known: initialObjects}
	start.names[nameA] = 1 << 0
	type node struct {
		s    state
		prev int
		step string
	}
	nodes := []node{{s: start, prev: -1}}
	seen := map[state]bool{start: true}
	for i := 0; i < len(nodes); i++ {
		s := nodes[i].s
		if why := s.violation(); why != "" {
			var trace []string
			for j := i; j > 0; j = nodes[j].prev {
				trace = append(trace, nodes[j].step)
			}
			for l, r := 0, len(trace)-1; l < r; l, r = l+1, r-1 {
				trace[l], trace[r] = trace[r], trace[l]
			}
			return len(nodes), why + " after: " + strings.Join(trace, "; ")
		}
		next, steps := s.next(v)
		for k, t := range next {
			if !seen[t] {
				seen[t] = true
				nodes = append(nodes, node{s: t, prev: i, step: steps[k]})
			}
		}
	}
	return len(nodes), ""
}

// TestProtocolSafe: with every rule, no interleaving of the scope lets a
// name reach a missing object, and the host's publishes all complete in
// some interleaving (the scope is not vacuous).
func TestProtocolSafe(t *testing.T) {
	n, trace := check(ruleAll)
	if trace != "" {
		t.Fatalf("the protocol lets a name reach a missing object: %s", trace)
	}
	t.Logf("%d states, no violation", n)
	if n < 1000 {
		t.Errorf("only %d states: the scope is smaller than meant", n)
	}
}

// TestProtocolVariantsFail: each rule is needed: dropping it lets the
// checker find an interleaving where a name reaches a missing object.
func TestProtocolVariantsFail(t *testing.T) {
	for _, v := range []variant{trustKnown, verifyBeforeKey, noSecondMark, noWait, publishWithoutKey, noFence} {
		n, trace := check(v)
		if trace == "" {
			t.Errorf("%v: no violation found in %d states; the checker cannot tell this rule is needed", v, n)
			continue
		}
		t.Logf("%v: %s", v, trace)
	}
}
