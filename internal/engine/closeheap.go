package engine

// closeHeap is a min-heap of entities by the close time of their next window to emit, with one
// entry per entity updated in place, so that its size follows the entities, not the events. Each
// entry also holds when the entity's last open window closes, which bounds an idle advance.
type closeHeap struct {
	at      []int64
	last    []int64
	entity  []string
	indexOf map[string]int
}

func newCloseHeap() closeHeap { return closeHeap{indexOf: map[string]int{}} }

func (h *closeHeap) Len() int { return len(h.at) }

func (h *closeHeap) minAt() int64 { return h.at[0] }

func (h *closeHeap) minEntity() string { return h.entity[0] }

func (h *closeHeap) set(entity string, at, last int64) {
	if i, ok := h.indexOf[entity]; ok {
		old := h.at[i]
		h.at[i], h.last[i] = at, last
		if at < old {
			h.up(i)
		} else {
			h.down(i)
		}
		return
	}
	h.at = append(h.at, at)
	h.last = append(h.last, last)
	h.entity = append(h.entity, entity)
	h.indexOf[entity] = len(h.at) - 1
	h.up(len(h.at) - 1)
}

func (h *closeHeap) remove(entity string) {
	i, ok := h.indexOf[entity]
	if !ok {
		return
	}
	last := len(h.at) - 1
	h.swap(i, last)
	h.at, h.last, h.entity = h.at[:last], h.last[:last], h.entity[:last]
	delete(h.indexOf, entity)
	if i < last {
		h.down(i)
		h.up(i)
	}
}

func (h *closeHeap) swap(i, j int) {
	h.at[i], h.at[j] = h.at[j], h.at[i]
	h.last[i], h.last[j] = h.last[j], h.last[i]
	h.entity[i], h.entity[j] = h.entity[j], h.entity[i]
	h.indexOf[h.entity[i]] = i
	h.indexOf[h.entity[j]] = j
}

func (h *closeHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h.at[p] <= h.at[i] {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *closeHeap) down(i int) {
	n := len(h.at)
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.at[l] < h.at[m] {
			m = l
		}
		if r < n && h.at[r] < h.at[m] {
			m = r
		}
		if m == i {
			return
		}
		h.swap(i, m)
		i = m
	}
}
