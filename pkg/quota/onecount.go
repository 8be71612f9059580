package quota

import "sync"

// oneCount lets one write at a time count what a tally holds from
// storage (a project's usage, an organization's Projects): the writes
// that waited for a count take its outcome rather than count again. n
// and err are guarded by the lock of what holds the tally, under which a
// write reads n with the tally (seen), so that a count finished after
// the write read the tally is one it takes.
type oneCount struct {
	// mu is held while a count runs.
	mu sync.Mutex
	// n is how many counts finished, err the last one's failure.
	n   int64
	err error
}

// run counts with count, unless a count finished since the write read
// n as seen: then it returns that count's outcome. owner is the lock
// that guards n and err; done, if not nil, runs under it with the count
// made (n moved) when the count succeeded, so that a write reading n
// sees what the count set with it.
func (c *oneCount) run(owner sync.Locker, seen int64, count func() error, done func()) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	owner.Lock()
	since, last := c.n != seen, c.err
	owner.Unlock()
	if since {
		return last
	}
	err := count()
	owner.Lock()
	c.n++
	c.err = err
	if err == nil && done != nil {
		done()
	}
	owner.Unlock()
	return err
}
