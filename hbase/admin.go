package hbase

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Admin runs table administration through the active master. Get one from Client.Admin.
type Admin struct{ c *Client }

// Admin returns the client's administration interface.
func (c *Client) Admin() *Admin { return &Admin{c: c} }

// FamilySpec is a column family and its attributes, named as the HBase shell names them, e.g.
// VERSIONS "1", TTL "86400" (seconds), BLOOMFILTER "ROW", COMPRESSION "NONE" or "SNAPPY" where the
// server has the codec. Values are strings, as HBase stores them.
type FamilySpec struct {
	Name       string            // family name
	Attributes map[string]string // e.g. VERSIONS, TTL, BLOOMFILTER, COMPRESSION; none means defaults
}

// TableSpec describes a table: its name ("table" or "ns:table"), families, table attributes, and
// for CreateTable the split keys that pre-split it into len(SplitKeys)+1 regions.
type TableSpec struct {
	Name       string            // "table" or "ns:table"
	Families   []FamilySpec      // at least one
	Attributes map[string]string // table attributes, e.g. DURABILITY; none means defaults
	SplitKeys  [][]byte          // region boundaries, any order (they are sorted); CreateTable only
}

// CreateTable creates a table and waits until its procedure finished (regions assigned).
func (a *Admin) CreateTable(ctx context.Context, spec TableSpec) error {
	if spec.Name == "" || len(spec.Families) == 0 {
		return errInvalid("create table", "table %q needs a name and at least one family", spec.Name)
	}
	tn := ParseTableName(spec.Name)
	p := getBuf()
	*p = appendMessage(*p, 1, func(b []byte) []byte { return appendTableSchema(b, tn, &spec) })
	// The master builds regions between consecutive keys as given: unsorted keys would make
	// inverted regions, so sort them (and drop duplicates and the empty key) first.
	keys := slices.Clone(spec.SplitKeys)
	slices.SortFunc(keys, bytes.Compare)
	keys = slices.CompactFunc(keys, bytes.Equal)
	for _, k := range keys {
		if len(k) == 0 {
			continue
		}
		*p = appendBytesField(*p, 2, k)
	}
	if err := a.procedure(ctx, "create table "+spec.Name, "CreateTable", p); err != nil {
		return err
	}
	a.c.regions.dropTable(tn.String())
	return nil
}

func appendTableSchema(b []byte, tn TableName, spec *TableSpec) []byte {
	b = appendTableName(b, 1, tn)
	b = appendBytesPairs(b, 2, spec.Attributes)
	for _, f := range spec.Families {
		b = appendMessage(b, 3, func(b []byte) []byte {
			b = appendStringField(b, 1, f.Name)
			return appendBytesPairs(b, 2, f.Attributes)
		})
	}
	return b
}

// appendBytesPairs appends BytesBytesPair{first=1, second=2} entries in key order (deterministic
// requests are easier to debug).
func appendBytesPairs(b []byte, num protowire.Number, m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b = appendMessage(b, num, func(b []byte) []byte {
			b = appendStringField(b, 1, k)
			return appendStringField(b, 2, m[k])
		})
	}
	return b
}

// DisableTable disables a table and waits for it.
func (a *Admin) DisableTable(ctx context.Context, name string) error {
	return a.tableProcedure(ctx, "disable table", "DisableTable", name)
}

// EnableTable enables a table and waits for it.
func (a *Admin) EnableTable(ctx context.Context, name string) error {
	return a.tableProcedure(ctx, "enable table", "EnableTable", name)
}

// DeleteTable deletes a disabled table and waits for it.
func (a *Admin) DeleteTable(ctx context.Context, name string) error {
	err := a.tableProcedure(ctx, "delete table", "DeleteTable", name)
	a.c.regions.dropTable(ParseTableName(name).String())
	a.c.forgetSems("r:" + ParseTableName(name).String() + ",")
	return err
}

func (a *Admin) tableProcedure(ctx context.Context, op, method, name string) error {
	p := getBuf()
	*p = appendTableName(*p, 1, ParseTableName(name))
	return a.procedure(ctx, op+" "+name, method, p)
}

// procedure sends a master request that answers {proc_id=1} and waits for the procedure.
func (a *Admin) procedure(ctx context.Context, op, method string, param *[]byte) error {
	resp, err := a.call(ctx, op, method, param)
	if err != nil {
		return err
	}
	var procID uint64
	_ = eachField(resp, func(num protowire.Number, typ protowire.Type, v uint64, _ []byte) error {
		if num == 1 && typ == protowire.VarintType {
			procID = v
		}
		return nil
	})
	if procID == 0 {
		return nil // an old master that ran it synchronously
	}
	return a.WaitProcedure(ctx, procID)
}

// call sends one request to the active master, retrying while the master is busy or moving. The
// param buffer is consumed.
func (a *Admin) call(ctx context.Context, op, method string, param *[]byte) ([]byte, error) {
	body := append([]byte(nil), *param...)
	putBuf(param)
	var last error
	rt := retries{c: a.c}
	for round := range a.c.cfg.MaxRounds {
		if round > 0 {
			if err := rt.wait(ctx); err != nil {
				return nil, &Error{Op: op, Kind: KindBackoff, Err: errors.Join(err, last)}
			}
		}
		addr, err := a.c.masterServer(ctx)
		if err != nil {
			last = err
			continue
		}
		p := getBuf()
		*p = append(*p, body...)
		resp, _, err := a.c.rpc(ctx, serviceMaster, addr, method, p, nil)
		if err != nil {
			var e *Error
			if errors.As(err, &e) {
				e.Op = op
			}
			if retryHere(err) {
				last = err
				continue
			}
			return nil, err
		}
		return resp, nil
	}
	return nil, last
}

// WaitProcedure polls getProcedureResult until the master's procedure finished, and returns the
// procedure's failure, if any.
func (a *Admin) WaitProcedure(ctx context.Context, procID uint64) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.c.cfg.ProcedureTimeout)
		defer cancel()
	}
	wait := 20 * time.Millisecond
	for {
		p := getBuf()
		*p = appendVarintField(*p, 1, procID)
		resp, err := a.call(ctx, fmt.Sprintf("procedure %d", procID), "getProcedureResult", p)
		if err != nil {
			return err
		}
		state, exc, err := parseProcedureResult(resp)
		if err != nil {
			return &Error{Op: fmt.Sprintf("procedure %d", procID), Kind: KindPermanent, Err: err}
		}
		switch state {
		case 2: // FINISHED
			return exc
		case 0: // NOT_FOUND: finished long ago and forgotten, or never existed
			return &Error{Op: fmt.Sprintf("procedure %d", procID), Kind: KindPermanent, Message: "procedure not found"}
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return &Error{Op: fmt.Sprintf("wait for procedure %d", procID), Kind: KindBackoff, Err: ctx.Err()}
		}
		wait = min(wait*2, time.Second)
	}
}

// parseProcedureResult decodes GetProcedureResultResponse{state=1, exception=5
// ForeignExceptionMessage{generic_exception=2 GenericExceptionMessage{class_name=1, message=2}}}.
func parseProcedureResult(b []byte) (state uint64, exc error, err error) {
	err = eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, raw []byte) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			state = v
		case num == 5 && typ == protowire.BytesType:
			var class, msg string
			_ = eachField(raw, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
				if num == 2 && typ == protowire.BytesType {
					return eachField(raw, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
						switch {
						case num == 1 && typ == protowire.BytesType:
							class = string(raw)
						case num == 2 && typ == protowire.BytesType:
							msg = string(raw)
						}
						return nil
					})
				}
				return nil
			})
			e := remoteError("procedure", "", class, msg, false)
			if e.Class == "" {
				e.Message = "procedure failed"
			}
			exc = e
		}
		return nil
	})
	return state, exc, err
}

// ListTables returns the user tables (in every namespace when namespace is empty).
func (a *Admin) ListTables(ctx context.Context, namespace string) ([]TableName, error) {
	p := getBuf()
	if namespace != "" {
		*p = appendStringField(*p, 3, namespace)
	}
	resp, err := a.call(ctx, "list tables", "GetTableNames", p)
	if err != nil {
		return nil, err
	}
	var out []TableName
	err = eachField(resp, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
		if num == 1 && typ == protowire.BytesType {
			t, err := parseTableName(raw)
			out = append(out, t)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, &Error{Op: "list tables", Kind: KindPermanent, Err: err}
	}
	return out, nil
}

// DescribeTable returns a table's families and attributes as the master stores them (defaults
// included). SplitKeys is left empty.
func (a *Admin) DescribeTable(ctx context.Context, name string) (*TableSpec, error) {
	p := getBuf()
	*p = appendTableName(*p, 1, ParseTableName(name))
	resp, err := a.call(ctx, "describe table "+name, "GetTableDescriptors", p)
	if err != nil {
		return nil, err
	}
	var spec *TableSpec
	err = eachField(resp, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
		if num == 1 && typ == protowire.BytesType && spec == nil {
			s, err := parseTableSchema(raw)
			spec = &s
			return err
		}
		return nil
	})
	if err != nil {
		return nil, &Error{Op: "describe table " + name, Kind: KindPermanent, Err: err}
	}
	if spec == nil {
		return nil, &Error{Op: "describe table", Class: "org.apache.hadoop.hbase.TableNotFoundException", Message: name, Kind: KindPermanent}
	}
	return spec, nil
}

// parseTableSchema decodes TableSchema{table_name=1, attributes=2, column_families=3
// ColumnFamilySchema{name=1, attributes=2}}.
func parseTableSchema(b []byte) (TableSpec, error) {
	var s TableSpec
	s.Attributes = map[string]string{}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			tn, err := parseTableName(raw)
			s.Name = tn.String()
			return err
		case num == 2 && typ == protowire.BytesType:
			return parseBytesPair(raw, s.Attributes)
		case num == 3 && typ == protowire.BytesType:
			f := FamilySpec{Attributes: map[string]string{}}
			err := eachField(raw, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					f.Name = string(raw)
				case num == 2 && typ == protowire.BytesType:
					return parseBytesPair(raw, f.Attributes)
				}
				return nil
			})
			s.Families = append(s.Families, f)
			return err
		}
		return nil
	})
	return s, err
}

func parseBytesPair(b []byte, into map[string]string) error {
	var k, v string
	err := eachField(b, func(num protowire.Number, typ protowire.Type, _ uint64, raw []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			k = string(raw)
		case num == 2 && typ == protowire.BytesType:
			v = string(raw)
		}
		return nil
	})
	into[k] = v
	return err
}
