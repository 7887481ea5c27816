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
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "text/csv; charset=utf-8")
	h.Set(echo.HeaderContentDisposition, `attachment; filename="fulfilments.csv"`)
	if list.NextCursor != "" {
		h.Set("Next-Cursor", list.NextCursor)
	}
	c.Response().WriteHeader(http.StatusOK)
	w := csv.NewWriter(c.Response())
	_ = w.Write([]string{"id", "provider", "payment_id", "state", "attempt", "created_at", "updated_at", "dispatched_at", "checks"})
	for _, f := range list.Fulfilments {
		dispatched := ""
		if f.DispatchedAt != nil {
			dispatched = f.DispatchedAt.UTC().Format(time.RFC3339Nano)
		}
		_ = w.Write([]string{f.ID, cell(f.Provider), cell(f.PaymentID), string(f.State), strconv.Itoa(f.Attempt),
			f.CreatedAt.UTC().Format(time.RFC3339Nano), f.UpdatedAt.UTC().Format(time.RFC3339Nano), dispatched, strconv.Itoa(f.Checks)})
	}
	w.Flush()
	return w.Error()
}

// cell defuses a sender-written value for spreadsheets: one that starts like
// a formula (= + - @, tab, carriage return) is prefixed with a quote, so
// opening the export cannot run it.
func cell(v string) string {
	if v != "" && strings.ContainsRune("=+-@\t\r", rune(v[0])) {
		return "'" + v
	}
	return v
}
