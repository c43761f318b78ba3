package replicationtest

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Col is a result column: its name and type oid (pgtype.TextOID, ...).
type Col struct {
	Name string
	OID  uint32
}

// Result is the answer to a simple query, every value in text format.
type Result struct {
	Cols  []Col
	Rows  [][]*string // nil: NULL
	Tag   string      // the command tag; "SELECT n" when empty
	empty bool        // an empty query
}

// Rows is a result of cols with rows (see Add).
func Rows(cols []Col, rows ...[]any) *Result {
	r := &Result{Cols: cols}
	for _, row := range rows {
		r.Add(row...)
	}
	return r
}

// Tag is the result of a command without rows.
func Tag(tag string) *Result { return &Result{Tag: tag} }

// Add appends a row. Values are rendered as PostgreSQL prints them: nil
// is NULL, a bool t or f, a pglogrepl.LSN X/X, a time.Time in ISO style,
// a []string an array, anything else by fmt.
func (r *Result) Add(values ...any) {
	row := make([]*string, len(values))
	for i, v := range values {
		if v == nil {
			continue
		}
		var s string
		switch v := v.(type) {
		case string:
			s = v
		case bool:
			s = "f"
			if v {
				s = "t"
			}
		case pglogrepl.LSN:
			s = v.String()
		case time.Time:
			s = v.UTC().Format("2006-01-02 15:04:05.999999") + "+00"
		case []string:
			s = "{" + strings.Join(v, ",") + "}"
		case float64:
			s = strconv.FormatFloat(v, 'g', -1, 64)
		default:
			s = fmt.Sprint(v)
		}
		row[i] = &s
	}
	r.Rows = append(r.Rows, row)
}

func (r *Result) send(be *pgproto3.Backend) {
	if r.empty {
		be.Send(&pgproto3.EmptyQueryResponse{})
		return
	}
	if len(r.Cols) > 0 {
		fields := make([]pgproto3.FieldDescription, len(r.Cols))
		for i, c := range r.Cols {
			fields[i] = pgproto3.FieldDescription{Name: []byte(c.Name), DataTypeOID: c.OID, DataTypeSize: -1, TypeModifier: -1}
		}
		be.Send(&pgproto3.RowDescription{Fields: fields})
		for _, row := range r.Rows {
			values := make([][]byte, len(row))
			for i, v := range row {
				if v != nil {
					values[i] = []byte(*v)
				}
			}
			be.Send(&pgproto3.DataRow{Values: values})
		}
	}
	tag := r.Tag
	if tag == "" {
		tag = fmt.Sprintf("SELECT %d", len(r.Rows))
	}
	be.Send(&pgproto3.CommandComplete{CommandTag: []byte(tag)})
}
