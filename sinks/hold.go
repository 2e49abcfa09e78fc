package sinks

// holdPoll stops the loop polling (see Run) until a write lands, and records the partitions of the
// full batch as held. Not polling is the backpressure: franz-go stops fetching once its buffer is
// full, and its own goroutine keeps heartbeating, so the member stays in its group.
//
// franz-go's PauseFetchPartitions was used first; under load, about one run in ten left a
// partition unfetched after pause/resume cycles (nothing paused, nothing buffered, lag never
// drained), in v1.22.3. Holding the poll gives the same backpressure without that path.
func (s *FlushThenCommit) holdPoll(parts map[string][]int32) {
	s.hold = true
	if len(s.held) == 0 {
		s.held = parts
		s.m.setHeld(countParts(parts))
		s.log.Info("store behind: poll held", "partitions", parts)
	}
}

// release lets the loop poll again.
func (s *FlushThenCommit) release() {
	s.hold = false
	if len(s.held) == 0 {
		return
	}
	s.log.Info("poll released", "partitions", s.held)
	s.held = nil
	s.m.setHeld(0)
}

// dropHeld stops counting partitions that were taken away as held: the metric must not show a
// partition this member no longer owns. Called with mu held.
func (s *FlushThenCommit) dropHeld(parts map[string][]int32) {
	if s.held == nil {
		return
	}
	for t, ps := range parts {
		var keep []int32
	outer:
		for _, q := range s.held[t] {
			for _, p := range ps {
				if p == q {
					continue outer
				}
			}
			keep = append(keep, q)
		}
		if len(keep) == 0 {
			delete(s.held, t)
		} else {
			s.held[t] = keep
		}
	}
	s.m.setHeld(countParts(s.held))
}

func countParts(m map[string][]int32) int {
	n := 0
	for _, ps := range m {
		n += len(ps)
	}
	return n
}
