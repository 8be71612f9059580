package tenantstorage

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// turns lets one of a server's transactions at a time move each tally.
// Two transactions of one server that expect a tally at one revision
// cannot both store: without turns, a burst of creates in one project
// through one replica would retry each other round after round (n² failed
// transactions, the last past maxTallyRounds answered 429), and a burst
// of first writes would each count the project, each count's write lost
// to the others' creates. Taking turns, rounds are lost only to other
// replicas.
//
// Taking turns alone would commit such a burst one transaction after
// another, each waiting for the one before it: a third of the rate at
// which etcd commits the same creates of a project whose objects are not
// counted. So the writes that wait for the same tallies are committed
// together: the write that takes the turn commits, in its one
// transaction, every write then waiting for the same tallies that fits
// with those before it (see commitBatch), and the tallies move by what
// they all add. What it holds is an entry per tally with a transaction
// under way or waiting, nothing once the burst is over.
type turns struct {
	mu   sync.Mutex
	held map[string]*turn
	// waiting are, by their tallies' keys (batchSet), the writes waiting
	// for their turn that another may commit with its own.
	waiting map[string][]*talliedTxn
}

// turn is one tally's: its token channel holds a value while a
// transaction has the turn; users counts those holding or waiting.
type turn struct {
	token chan struct{}
	users int
}

// talliedTxn is one transaction that moves tallies (commitTallied), in
// its round: what it requires, writes and reads when it fails, and, once
// another write committed it in its own transaction, the outcome.
type talliedTxn struct {
	// ctx is its request's: one that ended is not taken into another's
	// transaction.
	ctx          context.Context
	guard        TallyGuard
	keys         []string
	ifs          []clientv3.Cmp
	thens        []clientv3.Op
	othersFailed func(*clientv3.TxnResponse) bool
	elses        []clientv3.Op
	// alone: commit it in a transaction of its own, as the last one it
	// was committed with failed on what it cannot tell apart.
	alone bool
	// joined is closed once out holds the outcome of the transaction
	// another write committed it in.
	joined chan struct{}
	out    round
}

// round is the outcome of one round of a tallied write: the transaction's
// answer (its responses begin with the write's own elses); when it failed
// on the tallies only (moved), what they hold; unsent says an error came
// before the transaction was sent, or after it failed: nothing was stored;
// again says the write was not committed and waits for its turn anew.
type round struct {
	resp          *clientv3.TxnResponse
	now           []Tally
	moved, unsent bool
	again         bool
	// lost says the transaction failed on another write's own
	// condition, the tallies as expected: not a round the write's
	// tallies were moved in by others (maxTallyRounds).
	lost bool
	err  error
}

// Bounds of one transaction committing several writes: etcd refuses a
// transaction of more compares or operations than its --max-txn-ops (see
// Joints.SetMaxTxnOps) or larger than its --max-request-bytes (1.5 MiB by
// default).
const (
	// DefaultMaxTxnOps is etcd's default --max-txn-ops.
	DefaultMaxTxnOps = 128
	maxBatchBytes    = 1 << 20
	// batchTimeout bounds a transaction committing other requests' writes
	// besides the request's own, which does not end with the request:
	// the others wait for its outcome.
	batchTimeout = time.Minute
)

// batchSet names the writes that may be committed together: those of the
// same tallies.
func batchSet(keys []string) string { return strings.Join(keys, "\x00") }

// take waits for the turn of every one of keys (in order, so two takers of
// overlapping keys cannot each hold what the other waits for) and returns
// what gives them back. It returns joined, holding nothing, once joined is
// closed (another write committed this one in its transaction).
func (t *turns) take(ctx context.Context, keys []string, joined <-chan struct{}) (_ func(), wasJoined bool, _ error) {
	if len(keys) == 0 {
		return noTurns, false, nil // a create with no tally: most of them
	}
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	taken := make([]*turn, 0, len(keys))
	done := func() {
		for i, tr := range taken {
			<-tr.token
			t.leave(keys[i], tr)
		}
	}
	for _, k := range keys {
		t.mu.Lock()
		if t.held == nil {
			t.held = map[string]*turn{}
		}
		tr := t.held[k]
		if tr == nil {
			tr = &turn{token: make(chan struct{}, 1)}
			t.held[k] = tr
		}
		tr.users++
		t.mu.Unlock()
		select {
		case tr.token <- struct{}{}:
			taken = append(taken, tr)
			select {
			case <-joined:
				// Committed by the write that held the turn before: its
				// transaction is done.
				done()
				return nil, true, nil
			default:
			}
		case <-joined:
			t.leave(k, tr)
			done()
			return nil, true, nil
		case <-ctx.Done():
			t.leave(k, tr)
			done()
			return nil, false, ctx.Err()
		}
	}
	return done, false, nil
}

func noTurns() {}

func (t *turns) leave(key string, tr *turn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr.users--; tr.users == 0 {
		delete(t.held, key)
	}
}

// wait puts w among the writes of set waiting for their turn.
func (t *turns) wait(set string, w *talliedTxn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.waiting == nil {
		t.waiting = map[string][]*talliedTxn{}
	}
	t.waiting[set] = append(t.waiting[set], w)
}

// unwait takes w from the writes waiting; it reports false when another
// write has taken it into its transaction meanwhile.
func (t *turns) unwait(set string, w *talliedTxn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ws := t.waiting[set]
	i := slices.Index(ws, w)
	if i < 0 {
		return false
	}
	t.setWaitingLocked(set, slices.Delete(ws, i, i+1))
	return true
}

func (t *turns) setWaitingLocked(set string, ws []*talliedTxn) {
	if len(ws) == 0 {
		delete(t.waiting, set)
		return
	}
	t.waiting[set] = ws
}

// drain takes from the writes of set waiting, in the order they came, as
// many as one transaction of at most maxOps compares and operations may
// hold beside lead's (which has the turn).
func (t *turns) drain(set string, lead *talliedTxn, maxOps int) []*talliedTxn {
	t.mu.Lock()
	defer t.mu.Unlock()
	ws := slices.DeleteFunc(t.waiting[set], func(w *talliedTxn) bool { return w == lead })
	ifs, thens, elses, bytes := lead.size()
	tallies := len(lead.keys)
	// etcd refuses a transaction that writes one key twice: a write of a
	// key another in it writes (two updates of one object, two creates of
	// one name) waits for a transaction of its own.
	written := map[string]bool{}
	lead.written(written)
	var taken, left []*talliedTxn
	for i, w := range ws {
		wi, th, e, b := w.size()
		if ifs+wi+tallies > maxOps || thens+th+tallies > maxOps || elses+e+tallies > maxOps || bytes+b > maxBatchBytes {
			left = append(left, ws[i:]...)
			break
		}
		if w.overlaps(written) || w.ctx.Err() != nil {
			left = append(left, w) // an ended one takes itself out
			continue
		}
		w.written(written)
		ifs, thens, elses, bytes = ifs+wi, thens+th, elses+e, bytes+b
		taken = append(taken, w)
	}
	t.setWaitingLocked(set, left)
	return taken
}

// written adds the keys w writes to keys.
func (w *talliedTxn) written(keys map[string]bool) {
	for _, op := range w.thens {
		keys[string(op.KeyBytes())] = true
	}
}

// overlaps reports whether w writes any of keys.
func (w *talliedTxn) overlaps(keys map[string]bool) bool {
	for _, op := range w.thens {
		if keys[string(op.KeyBytes())] {
			return true
		}
	}
	return false
}

// size is what w's part of a transaction holds: its compares, writes and
// reads, and the bytes it writes.
func (w *talliedTxn) size() (ifs, thens, elses, bytes int) {
	for _, op := range w.thens {
		bytes += len(op.KeyBytes()) + len(op.ValueBytes())
	}
	return len(w.ifs), len(w.thens), len(w.elses), bytes
}

// batchRound is one round of w (which has tallies) in the tallies' turn:
// when another write of the same tallies holds the turn, w waits for it,
// and may be committed in its transaction; when w takes the turn, it
// commits with its own the writes then waiting that fit.
func (s *store) batchRound(ctx context.Context, w *talliedTxn) round {
	t := &s.joints.turns
	set := batchSet(w.keys)
	// A new channel each round: the last one was closed when another
	// write committed this one, or told it to wait anew.
	w.joined = make(chan struct{})
	if !w.alone {
		t.wait(set, w)
	}
	done, joined, err := t.take(ctx, w.keys, w.joined)
	if joined {
		return w.out
	}
	if err != nil {
		if !w.alone && !t.unwait(set, w) {
			<-w.joined // in another write's transaction: its outcome
			return w.out
		}
		return round{unsent: true, err: err}
	}
	defer done()
	if w.alone {
		w.alone = false // its next round may be committed with others again
		return s.commitBatch(ctx, []*talliedTxn{w}, nil)
	}
	lead := w.guard.Expect(nil)
	if !storable(lead) {
		// A round that reads what the tallies hold: nothing to share.
		t.unwait(set, w)
		return s.commitBatch(ctx, []*talliedTxn{w}, lead)
	}
	batch := append([]*talliedTxn{w}, t.drain(set, w, s.joints.maxTxnOps())...)
	return s.commitBatch(ctx, batch, lead)
}

// storable reports whether a transaction expecting tallies may store: each
// is expected at a revision it can have.
func storable(tallies []Tally) bool {
	for _, t := range tallies {
		if t.Revision < 0 {
			return false
		}
	}
	return true
}

// commitBatch commits batch[0], whose guard expects lead (nil: not asked
// yet), with the other writes of batch whose guards expect the tallies
// where lead does and let them store after those before them, in one
// transaction moving the tallies by what they all add. The others are
// told to wait for their turn again, to be committed alone. It returns batch[0]'s outcome and
// sets the others' (their out, joined closed).
func (s *store) commitBatch(ctx context.Context, batch []*talliedTxn, lead []Tally) round {
	first := batch[0]
	if first.guard != nil && lead == nil {
		lead = first.guard.Expect(nil)
	}
	in := batch[:1]
	ahead := make([]int64, len(lead))
	for i, t := range lead {
		ahead[i] = t.Add
	}
	for _, w := range batch[1:] {
		e := w.guard.Expect(ahead)
		if !sameTallies(e, lead) {
			// It does not fit after those before it (or knows the tallies
			// otherwise): decided alone at its next turn, not drained
			// into each next transaction only to be sent back again.
			w.alone, w.out = true, round{again: true}
			close(w.joined)
			continue
		}
		for i, t := range e {
			ahead[i] += t.Add
		}
		in = append(in, w)
	}
	tallies := slices.Clone(lead)
	for i := range tallies {
		tallies[i].Add = ahead[i]
	}
	var ifs []clientv3.Cmp
	var thens, elses []clientv3.Op
	for _, w := range in {
		ifs, thens, elses = append(ifs, w.ifs...), append(thens, w.thens...), append(elses, w.elses...)
	}
	tIfs, tThens, tReads := s.tallyOps(tallies)
	txnCtx := ctx
	if len(in) > 1 {
		var cancel context.CancelFunc
		txnCtx, cancel = context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
		defer cancel()
	}
	resp, err := s.joints.kv.Txn(txnCtx).If(append(ifs, tIfs...)...).Then(append(thens, tThens...)...).Else(append(elses, tReads...)...).Commit()
	outs := make([]round, len(in))
	switch {
	case err != nil && len(in) > 1 && notApplied(err):
		// etcd refused the transaction unapplied (too large, say):
		// each write is committed alone next, to be refused, or not, on
		// its own.
		for i, w := range in {
			w.alone, outs[i] = true, round{again: true}
		}
	case err != nil:
		for i := range outs {
			outs[i] = round{err: err}
		}
	case resp.Succeeded:
		now := make([]Tally, len(tallies))
		for i, t := range tallies {
			now[i] = applied(t, resp.Header.Revision)
		}
		for i, w := range in {
			if w.guard != nil {
				w.guard.Stored(now)
			}
			outs[i] = round{resp: resp}
		}
	default:
		outs = s.failedBatch(in, tallies, resp)
	}
	for i, w := range in[1:] {
		w.out = outs[i+1]
		close(w.joined)
	}
	return outs[0]
}

// failedBatch returns the outcome of each of in, whose transaction (with
// tallies) failed: each is given the answer as if its transaction had been
// its own. A write whose own compares failed is done (not the tallies' to
// decide). Where none did and the tallies moved, each asks its guard again
// with what they hold; where one did, the others do so too, their round
// lost to it (not counted) where the tallies did not move; where none
// did and the tallies did not move, what failed is what one of them
// requires without reading it, and each is committed alone next.
func (s *store) failedBatch(in []*talliedTxn, tallies []Tally, resp *clientv3.TxnResponse) []round {
	total := 0
	for _, w := range in {
		total += len(w.elses)
	}
	reads := resp.Responses[total:]
	now, moved, err := talliesRead(tallies, reads)
	outs := make([]round, len(in))
	failed := make([]bool, len(in))
	anyFailed := false
	off := 0
	for i, w := range in {
		own := &clientv3.TxnResponse{Header: resp.Header, Responses: append(slices.Clone(resp.Responses[off:off+len(w.elses)]), reads...)}
		off += len(w.elses)
		failed[i] = anyFound(own.Responses[:len(w.elses)])
		if w.othersFailed != nil {
			failed[i] = w.othersFailed(own)
		}
		anyFailed = anyFailed || failed[i]
		outs[i].resp = own
	}
	for i, w := range in {
		switch {
		case failed[i]:
		case err != nil:
			outs[i] = round{unsent: true, err: err}
		case len(in) == 1:
			outs[i].now, outs[i].moved = now, moved
		default:
			// The tallies as read: what they hold, whether they moved or
			// not. A write lost to another's own failure, the tallies
			// as expected, lost no round to them (commitTallied).
			outs[i].now, outs[i].moved = now, true
			outs[i].lost = anyFailed && !moved
			w.alone = !anyFailed && !moved
		}
	}
	return outs
}

// sameTallies reports whether a and b expect the same tallies at the same
// revisions and values.
func sameTallies(a, b []Tally) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || a[i].Revision != b[i].Revision || a[i].Value != b[i].Value || a[i].Revision < 0 {
			return false
		}
	}
	return true
}
