package hbase

import (
	"errors"
	"fmt"
	"testing"
)

func TestIsTableNotFound(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&Error{Class: "org.apache.hadoop.hbase.TableNotFoundException"}, true},
		{&Error{Class: "TableNotFoundException"}, true},
		{fmt.Errorf("describe: %w", &Error{Class: "org.apache.hadoop.hbase.TableNotFoundException"}), true},
		{&Error{Class: "org.apache.hadoop.hbase.NamespaceNotFoundException"}, false},
		{errors.New("TableNotFoundException"), false},
		{nil, false},
	} {
		if got := IsTableNotFound(c.err); got != c.want {
			t.Errorf("IsTableNotFound(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
