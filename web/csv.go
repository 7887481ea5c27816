package web

import (
	"encoding/csv"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// writeFulfilmentsCSV answers a listing as CSV, one row per fulfilment; the
// next page's cursor travels in the Next-Cursor header.
func writeFulfilmentsCSV(c echo.Context, list FulfilmentList) error {
	rows := make([][]string, len(list.Fulfilments))
	for i, f := range list.Fulfilments {
		dispatched := ""
		if f.DispatchedAt != nil {
			dispatched = stampNano(*f.DispatchedAt)
		}
		rows[i] = []string{f.ID, cell(f.Provider), cell(f.PaymentID), string(f.State), strconv.Itoa(f.Attempt),
			stampNano(f.CreatedAt), stampNano(f.UpdatedAt), dispatched, strconv.Itoa(f.Checks), f.ActionName, string(f.Action)}
	}
	return writeCSV(c, "fulfilments.csv", list.NextCursor,
		// The action's columns are last: readers of the older columns by
		// position read what they always read.
		[]string{"id", "provider", "payment_id", "state", "attempt", "created_at", "updated_at", "dispatched_at", "checks", "action_name", "action"}, rows)
}

// writeEventsCSV answers an event listing as CSV, one row per event,
// without payloads.
func writeEventsCSV(c echo.Context, list EventList) error {
	rows := make([][]string, len(list.Events))
	for i, e := range list.Events {
		rows[i] = []string{cell(e.Provider), cell(e.EventID), cell(e.Type), cell(e.PaymentID), strconv.Itoa(e.Deliveries),
			stampNano(e.FirstSeenAt), stampNano(e.LastSeenAt)}
	}
	return writeCSV(c, "events.csv", list.NextCursor,
		[]string{"provider", "event_id", "event_type", "payment_id", "deliveries", "first_seen_at", "last_seen_at"}, rows)
}

// writeCSV answers 200 with a CSV attachment: header, then rows; the next
// page's cursor, if any, in the Next-Cursor header.
func writeCSV(c echo.Context, filename, next string, header []string, rows [][]string) error {
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "text/csv; charset=utf-8")
	h.Set(echo.HeaderContentDisposition, `attachment; filename="`+filename+`"`)
	if next != "" {
		h.Set("Next-Cursor", next)
	}
	c.Response().WriteHeader(http.StatusOK)
	w := csv.NewWriter(c.Response())
	_ = w.Write(header)
	_ = w.WriteAll(rows)
	return w.Error()
}

func stampNano(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// cell defuses a sender-written value for spreadsheets: one that starts like
// a formula (= + - @, tab, carriage return) is prefixed with a quote, so
// opening the export cannot run it.
func cell(v string) string {
	if v != "" && strings.ContainsRune("=+-@\t\r", rune(v[0])) {
		return "'" + v
	}
	return v
}
