package projectcrds

import (
	"slices"
	"sync"
	"time"
)

// creates are the project CRDs admitted for creation that the index has
// not seen yet, by project (storage id) and name, each until the index sees
// it or reservationTTL has passed: with the index's CRDs they make the count
// --max-project-crds bounds, so that parallel creates cannot pass it. A create
// refused after admission (a name taken, a later plugin's refusal) holds its
// place until the TTL; one of a name the project already has reserves
// nothing (its create fails).
type creates struct {
	mu        sync.Mutex
	byProject map[string]map[string]time.Time
	// now is the clock (tests set it).
	now func() time.Time
}

// reservationTTL is how long an admitted create counts before the index
// sees its CRD: far longer than the index takes to see a stored CRD (its
// informer follows etcd within milliseconds), short enough that a create
// refused after admission soon frees its place.
const reservationTTL = 10 * time.Second

// maxPendingProjects is how many projects may hold reservations before the
// expired ones of every project are dropped (a project whose create failed
// after admission may never create again).
const maxPendingProjects = 1024

// reserve counts the create of name in project against max, with the
// project's CRDs in the index (read by have, under the lock, so that a CRD
// the index takes in meanwhile is counted there or as reserved, never
// neither); false if it would pass max. It reserves a place only if keep.
// A name the project has already passes: storage refuses its create (409).
func (c *creates) reserve(project, name string, have func() []string, max int, keep bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock()
	names := have()
	if slices.Contains(names, name) {
		return true
	}
	if c.byProject == nil {
		c.byProject = map[string]map[string]time.Time{}
	}
	if len(c.byProject) > maxPendingProjects {
		for p, pending := range c.byProject {
			for n, until := range pending {
				if !now.Before(until) {
					delete(pending, n)
				}
			}
			if len(pending) == 0 {
				delete(c.byProject, p)
			}
		}
	}
	pending := c.byProject[project]
	count := len(names)
	for n, until := range pending {
		switch {
		case !now.Before(until) || slices.Contains(names, n):
			delete(pending, n)
		case n != name:
			count++
		}
	}
	if count >= max {
		return false
	}
	if !keep {
		return true
	}
	if pending == nil {
		pending = map[string]time.Time{}
		c.byProject[project] = pending
	}
	pending[name] = now.Add(reservationTTL)
	return true
}

// seen drops the reservation of a CRD the index now holds.
func (c *creates) seen(project, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pending := c.byProject[project]; pending != nil {
		delete(pending, name)
		if len(pending) == 0 {
			delete(c.byProject, project)
		}
	}
}

func (c *creates) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}
