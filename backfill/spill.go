package backfill

import (
	"bufio"
	"cmp"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// facts holds the facts read, per source partition, and gives them back in offset order. What
// does not fit in its memory bound goes to files in a folder of its own, each a run sorted by
// offset, merged when read back: an external sort, so that a month of history needs disk rather
// than memory.
type facts struct {
	limit int64 // bytes held in memory before they are written out
	dir   string
	held  int64
	mem   map[int32][]fact
	runs  map[int32][]string // per partition, its files, each sorted by offset
	nRuns int
	// written counts the facts written out.
	written int64
}

// factOverhead is what a fact costs in memory beside its value and entity: its fields, and its
// share of the slices and maps that hold it.
const factOverhead = 64

func newFacts(limit int64, tempDir string) *facts {
	return &facts{limit: limit, dir: tempDir, mem: map[int32][]fact{}, runs: map[int32][]string{}}
}

// add keeps a fact; value must stay unchanged while the facts are held.
func (fs *facts) add(part int32, f fact) error {
	fs.mem[part] = append(fs.mem[part], f)
	fs.held += int64(len(f.value) + len(f.entity) + factOverhead)
	if fs.limit > 0 && fs.held > fs.limit {
		return fs.spill()
	}
	return nil
}

// spill writes every partition's facts held to a run file of its own.
func (fs *facts) spill() error {
	if !fs.spilled() {
		d, err := os.MkdirTemp(fs.dir, "abacus-backfill-")
		if err != nil {
			return fmt.Errorf("backfill: a folder for the facts that do not fit in memory: %w", err)
		}
		fs.dir = d
	}
	for p, held := range fs.mem {
		sortByOffset(held)
		name := fmt.Sprintf("%s/p%d-%d", fs.dir, p, fs.nRuns)
		fs.nRuns++
		if err := writeRun(name, held); err != nil {
			return err
		}
		fs.written += int64(len(held))
		fs.runs[p] = append(fs.runs[p], name)
	}
	clear(fs.mem)
	fs.held = 0
	return nil
}

func (fs *facts) spilled() bool { return fs.nRuns > 0 }

// close removes the files written.
func (fs *facts) close() {
	if fs.spilled() {
		os.RemoveAll(fs.dir)
	}
}

func sortByOffset(fs []fact) {
	slices.SortFunc(fs, func(x, y fact) int { return cmp.Compare(x.offset, y.offset) })
}

// writeRun writes facts, sorted by offset, to a new file: each as offset, time, entity, value.
func writeRun(name string, facts []fact) error {
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("backfill: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var b []byte
	for _, x := range facts {
		b = binary.AppendVarint(b[:0], x.offset)
		b = binary.AppendVarint(b, x.time)
		b = binary.AppendUvarint(b, uint64(len(x.entity)))
		b = append(b, x.entity...)
		b = binary.AppendUvarint(b, uint64(len(x.value)))
		b = append(b, x.value...)
		if _, err := w.Write(b); err != nil {
			f.Close()
			return fmt.Errorf("backfill: write %s: %w", name, err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("backfill: write %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("backfill: write %s: %w", name, err)
	}
	return nil
}

// partitions lists the partitions that have facts.
func (fs *facts) partitions() []int32 {
	var ps []int32
	for p := range fs.mem {
		ps = append(ps, p)
	}
	for p := range fs.runs {
		if _, ok := fs.mem[p]; !ok {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	return ps
}

// stream gives partition p's facts back in offset order: those held and those written out,
// merged.
func (fs *facts) stream(p int32) (*stream, error) {
	held := fs.mem[p]
	sortByOffset(held)
	s := &stream{entities: map[string]string{}}
	if len(held) > 0 {
		c := &cursor{held: held}
		_ = c.next(nil)
		heap.Push(&s.h, c)
	}
	for _, name := range fs.runs[p] {
		f, err := os.Open(name)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("backfill: %w", err)
		}
		c := &cursor{file: f, r: bufio.NewReaderSize(f, 256<<10), name: name}
		if err := c.next(s.entities); err != nil {
			s.close()
			return nil, err
		}
		if c.ok {
			heap.Push(&s.h, c)
		}
	}
	delete(fs.mem, p)
	return s, nil
}

// stream is one partition's facts in offset order.
type stream struct {
	h        cursors
	entities map[string]string // one copy of each entity read back
}

// peek is the next fact, or nil at the end.
func (s *stream) peek() *fact {
	if len(s.h) == 0 {
		return nil
	}
	return &s.h[0].cur
}

// advance moves past the fact peek returned.
func (s *stream) advance() error {
	c := s.h[0]
	if err := c.next(s.entities); err != nil {
		return err
	}
	if c.ok {
		heap.Fix(&s.h, 0)
	} else {
		heap.Pop(&s.h)
		c.close()
	}
	return nil
}

func (s *stream) close() {
	for _, c := range s.h {
		c.close()
	}
	s.h = nil
}

// cursor reads one sorted run: the facts held in memory, or a file.
type cursor struct {
	held []fact
	file *os.File
	r    *bufio.Reader
	name string
	cur  fact
	ok   bool
	buf  []byte
}

func (c *cursor) next(entities map[string]string) error {
	if c.file == nil {
		if c.ok {
			c.held[0].value = nil // its memory goes once the engine is done with it
			c.held = c.held[1:]
		}
		c.ok = len(c.held) > 0
		if c.ok {
			c.cur = c.held[0]
		}
		return nil
	}
	offset, err := binary.ReadVarint(c.r)
	if errors.Is(err, io.EOF) {
		c.ok = false
		return nil
	}
	bad := func(err error) error { return fmt.Errorf("backfill: read back %s: %w", c.name, err) }
	if err != nil {
		return bad(err)
	}
	t, err := binary.ReadVarint(c.r)
	if err != nil {
		return bad(err)
	}
	entity, err := c.bytes()
	if err != nil {
		return bad(err)
	}
	e, ok := entities[string(entity)]
	if !ok {
		e = string(entity)
		entities[e] = e
	}
	value, err := c.bytes()
	if err != nil {
		return bad(err)
	}
	c.cur, c.ok = fact{offset: offset, time: t, entity: e, value: slices.Clone(value)}, true
	return nil
}

// bytes reads a length and that many bytes, into the cursor's buffer.
func (c *cursor) bytes() ([]byte, error) {
	n, err := binary.ReadUvarint(c.r)
	if err != nil {
		return nil, err
	}
	if n > 1<<30 {
		return nil, fmt.Errorf("a field of %d bytes", n)
	}
	c.buf = slices.Grow(c.buf[:0], int(n))[:n]
	_, err = io.ReadFull(c.r, c.buf)
	return c.buf, err
}

func (c *cursor) close() {
	if c.file != nil {
		c.file.Close()
	}
}

// cursors is a heap of runs by the offset of their next fact.
type cursors []*cursor

func (h cursors) Len() int           { return len(h) }
func (h cursors) Less(i, j int) bool { return h[i].cur.offset < h[j].cur.offset }
func (h cursors) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *cursors) Push(x any)        { *h = append(*h, x.(*cursor)) }
func (h *cursors) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}
