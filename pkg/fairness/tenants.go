package fairness

import (
	"hash/maphash"
	"sync"
)

// tenantShards spread a per-tenant map over this many locks.
const tenantShards = 64

// tenantMap is what the budget and the seats hold per tenant, in shards each
// under a lock of its own, so that tenants' requests rarely wait for each
// other's bookkeeping.
type tenantMap[T any] struct {
	seed   maphash.Seed
	shards [tenantShards]tenantShard[T]
}

type tenantShard[T any] struct {
	mu      sync.Mutex
	tenants map[string]*T
}

func (m *tenantMap[T]) init() {
	m.seed = maphash.MakeSeed()
	for i := range m.shards {
		m.shards[i].tenants = map[string]*T{}
	}
}

// shard is the shard tenant's entry is in.
func (m *tenantMap[T]) shard(tenant string) *tenantShard[T] {
	return &m.shards[maphash.String(m.seed, tenant)%tenantShards]
}

// len counts the tenants held (for tests).
func (m *tenantMap[T]) len() int {
	n := 0
	for i := range m.shards {
		m.shards[i].mu.Lock()
		n += len(m.shards[i].tenants)
		m.shards[i].mu.Unlock()
	}
	return n
}
