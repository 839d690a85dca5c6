package console

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/static"
	"github.com/countersign/countersign/views/layout"
	"github.com/countersign/countersign/views/settings"
)

// ZoneSetter stores the zone a user reads times in. *auth.Service
// implements it.
type ZoneSetter interface {
	// SetTimeZone stores an IANA zone; with fromBrowser only when the
	// user chose none. EInvalidRequest for a name that is no zone.
	SetTimeZone(ctx context.Context, u models.User, zone string, fromBrowser bool) error
}

// Zones serves the reviewer's time-zone setting. Build it with NewZones.
type Zones struct {
	z      ZoneSetter
	assets layout.Assets
	clock  models.Clock
}

// NewZones returns the time-zone pages over z.
func NewZones(z ZoneSetter, assets *static.Assets, clock models.Clock) *Zones {
	if clock == nil {
		clock = models.SystemClock{}
	}
	return &Zones{z: z, assets: AssetsFor(assets), clock: clock}
}

// commonZones are suggestions for the zone field; any IANA name works.
var commonZones = []string{
	"UTC", "Africa/Cairo", "Africa/Johannesburg", "Africa/Lagos", "America/Chicago", "America/Denver",
	"America/Los_Angeles", "America/Mexico_City", "America/New_York", "America/Sao_Paulo", "America/Toronto",
	"Asia/Dubai", "Asia/Hong_Kong", "Asia/Kolkata", "Asia/Seoul", "Asia/Shanghai", "Asia/Singapore",
	"Asia/Tokyo", "Australia/Sydney", "Europe/Berlin", "Europe/Istanbul", "Europe/London", "Europe/Madrid",
	"Europe/Moscow", "Europe/Paris", "Pacific/Auckland",
}

// Page serves GET /settings/zone.
func (h *Zones) Page(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	return h.render(c, http.StatusOK, s.User, s.User.Location().String(), "")
}

func (h *Zones) render(c echo.Context, status int, u models.User, zone, problem string) error {
	s, _ := signedIn(c)
	loc := u.Location()
	now := h.clock.Now()
	page := settings.ZonePage{
		Layout: layout.Page{Title: "Time zone", User: frameUser(s), CSRF: s.CSRF, Active: "zone", Assets: h.assets},
		Zone:   zone, Chosen: u.TimeZone != "", Zones: commonZones, Error: problem, CSRF: s.CSRF,
		Example: now.In(loc).Format("2006-01-02 15:04 MST") + " (" + now.UTC().Format(time.DateTime) + " UTC)",
	}
	noStore(c)
	return render(c, status, settings.Zone(page))
}

// Save serves POST /settings/zone (form field zone). With from_browser=1
// (the script sending the browser's zone) it only fills in a zone the
// reviewer has not chosen, and answers 204; otherwise it stores the choice
// and returns to the page, or shows why the name is no zone.
func (h *Zones) Save(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	zone, auto := c.FormValue("zone"), c.FormValue("from_browser") == "1"
	if err := h.z.SetTimeZone(c.Request().Context(), s.User, zone, auto); err != nil {
		if models.ErrorCode(err) != models.EInvalidRequest || auto {
			return err
		}
		return h.render(c, http.StatusUnprocessableEntity, s.User, zone, models.ErrorMessage(err))
	}
	if auto {
		return c.NoContent(http.StatusNoContent)
	}
	return seeOther(c, "/settings/zone")
}
