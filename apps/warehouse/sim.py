"""A vectorised warehouse of single-item containers, one planning epoch at a time.

Each epoch: the chosen consolidation moves are applied (a partly full source container of
an item is emptied into another container of the same item), inbound replenishment is put
away into empty containers (what cannot be put away waits in a backlog), picks drain the
containers of each ordered item (partial containers first), and items below their reorder
point are replenished after a lead time. Labor is shared: consolidation first (within its
budget), then put-aways, then picks. The true objective is throughput, units picked plus
units put away per labor hour; the proxy the logs record is the containers freed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fieldrl.apps.warehouse.config import WarehouseConfig
from fieldrl.errors import FieldrlError

__all__ = ["CONTEXT", "FEATURES", "Candidates", "EpochResult", "Warehouse"]

FEATURES = (
    "log_demand", "unit_liters", "source_fill", "target_fill", "source_dist", "target_dist",
    "move_dist", "units", "labor_min", "log_item_containers", "days_of_stock",
    "epochs_since_pick", "zone_empty_share", "zone_backlog", "liters_freed", "heuristic",
)  # fmt: skip
CONTEXT = (
    "utilization", "empty_share", "inbound_forecast", "backlog_share", "labor_hours",
    "time_sin", "time_cos",
)  # fmt: skip


@dataclass
class Candidates:
    """The consolidation moves open in one epoch (source -> target, same item)."""

    source: np.ndarray  # container indices
    target: np.ndarray
    item: np.ndarray
    zone: np.ndarray  # the source's zone (the zone rule counts moves per zone)
    labor_hours: np.ndarray
    features: np.ndarray  # [n, len(FEATURES)] float32
    context: np.ndarray  # [len(CONTEXT)] float32

    @property
    def n(self) -> int:
        return int(self.source.size)

    def heuristic_scores(self) -> np.ndarray:
        """Velocity-weighted space freed per labor hour (the operations rule of thumb)."""
        return self.features[:, FEATURES.index("heuristic")]


@dataclass
class EpochResult:
    units_picked: float
    units_put_away: float
    units_lost: float  # ordered by customers but not picked (stockout or no labor)
    units_replenished: float  # ordered from suppliers this epoch (arrives after the lead time)
    backlog_units: float  # waiting for an empty container
    containers_freed: int  # a proxy reward
    liters_freed: float  # a proxy reward: capacity of the containers emptied by moves
    moves: int
    labor_consolidation: float
    empty_containers: int
    labor_hours: float = 0.0  # the epoch's labor (the calendar may scale it)
    objective: float = 0.0  # the evaluation objective's value of the epoch (see ObjectiveConfig)
    travel_m: float = 0.0  # walked by pickers (to each container visited and back)
    # every put-away of the epoch: (container, units) rows
    put_away_into: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))

    @property
    def throughput(self) -> float:
        """Units processed this epoch (per labor hour: divide by the epoch's hours)."""
        return self.units_picked + self.units_put_away


class Warehouse:
    """One warehouse; the same config and seed give the same warehouse and demand."""

    def __init__(self, cfg: WarehouseConfig, seed: int) -> None:
        self.cfg = cfg
        self.rng = np.random.default_rng(seed)
        self.epoch = 0
        self._layout()
        self._items()
        self._zones()
        self._stock()
        self._classes_and_shocks(seed)

    # ----- construction -------------------------------------------------------------
    def _layout(self) -> None:
        lay, rng, c = self.cfg.layout, self.rng, self.cfg.layout.containers
        if len(lay.capacity_liters) != len(lay.capacity_mix):
            raise FieldrlError("layout.capacity_liters and capacity_mix differ in length")
        mix = np.asarray(lay.capacity_mix, float)
        self.capacity = rng.choice(
            np.asarray(lay.capacity_liters, np.float32), c, p=mix / mix.sum()
        )
        self.aisle = rng.integers(0, lay.aisles_per_zone, c).astype(np.int16)
        self.level = rng.integers(0, lay.levels, c).astype(np.int16)
        self.item_of = np.full(c, -1, np.int32)
        self.units = np.zeros(c, np.int64)
        self.last_pick = np.zeros(c, np.int32)

    def _items(self) -> None:
        it, rng, n = self.cfg.items, self.rng, self.cfg.items.items
        rank = rng.permutation(n) + 1
        weights = rank ** (-it.zipf_alpha)
        self.rate = it.demand_units_per_epoch * weights / weights.sum()
        self.unit_liters = np.clip(
            it.unit_liters_median * rng.lognormal(0.0, it.unit_liters_sigma, n),
            0.02, 0.25 * min(self.cfg.layout.capacity_liters),
        )  # fmt: skip
        self.hazmat = rng.random(n) < it.hazmat_fraction
        self.backlog = np.zeros(n, np.int64)
        self.pipeline = np.zeros((self.cfg.inventory.lead_epochs, n), np.int64)

    def _classes_and_shocks(self, seed: int) -> None:
        """Velocity classes by demand rank (ABC) for the objective, and which items each
        demand shock hits (from a stream of its own: the warehouse draws stay the same)."""
        obj = self.cfg.objective
        rank = np.empty(self.rate.size, np.int64)
        rank[np.argsort(-self.rate, kind="stable")] = np.arange(self.rate.size)
        bounds = np.cumsum(obj.class_shares) * self.rate.size
        self.item_class = np.minimum(np.searchsorted(bounds, rank, side="right"),
                                     len(obj.class_shares) - 1)  # fmt: skip
        self.unit_value = np.asarray(obj.class_weights, np.float64)[self.item_class]
        shock_rng = np.random.default_rng([seed, 11])
        self.shocked = [shock_rng.random(self.rate.size) < shock.items_share
                        for shock in self.cfg.items.demand_shock]  # fmt: skip

    @property
    def day_epoch(self) -> int:
        """The epoch counted from the end of warm-up (negative during warm-up)."""
        return self.epoch - self.cfg.sim.warmup_epochs

    def labor_hours(self) -> float:
        """This epoch's labor: ``labor.hours_per_epoch`` scaled by the calendar."""
        return self.cfg.labor.hours(self.day_epoch)

    def _demand_rate(self) -> np.ndarray:
        rate = self.rate
        for shock, hit in zip(self.cfg.items.demand_shock, self.shocked, strict=True):
            if shock.covers(self.day_epoch):
                rate = np.where(hit, rate * shock.factor, rate)
        return rate

    def _zones(self) -> None:
        """Zone 0 (hazmat) is sized to the hazmat items' share of stock volume, scaled so a
        nominal draw gets ``hazmat_share``; items are slotted to one home zone each, with
        zones loaded unevenly (+-``zone_load_spread``) so some run short of empties first."""
        lay, rng, c = self.cfg.layout, self.rng, self.cfg.layout.containers
        volume = self.rate * self.unit_liters
        drawn = volume[self.hazmat].sum() / volume.sum()
        nominal = max(self.cfg.items.hazmat_fraction, 1e-9)
        hazmat = int(round(c * min(0.5, lay.hazmat_share * max(drawn / nominal, 0.25))))
        rest = np.arange(c - hazmat) * (lay.zones - 1) // max(c - hazmat, 1) + 1
        self.zone = np.concatenate([np.zeros(hazmat), rest]).astype(np.int16)
        self.distance = (
            self.zone * lay.zone_gap_m + self.aisle * lay.aisle_step_m
            + self.level * lay.level_height_m
        ).astype(np.float32)  # fmt: skip
        size = np.bincount(self.zone, minlength=lay.zones)[1:].astype(float)
        weight = size * rng.uniform(
            1 - lay.zone_load_spread, 1 + lay.zone_load_spread, lay.zones - 1
        )
        home = rng.choice(np.arange(1, lay.zones), self.rate.size, p=weight / weight.sum())
        self.home = np.where(self.hazmat, 0, home)

    def _reslot(self, containers_needed: np.ndarray) -> None:
        """Move the smallest items out of any overfull storage zone into the roomiest ones
        (slotting would not put more stock in a zone than it holds)."""
        inv, zones = self.cfg.inventory, self.cfg.layout.zones
        room = inv.occupancy * np.bincount(self.zone, minlength=zones)
        for _ in range(10 * zones):
            load = np.bincount(self.home, containers_needed, zones)
            over = np.flatnonzero(load[1:] > room[1:]) + 1
            if over.size == 0:
                return
            z = over[0]
            mine = np.flatnonzero(self.home == z)
            mine = mine[np.argsort(containers_needed[mine])]
            excess = load[z] - room[z]
            moving = mine[: np.searchsorted(np.cumsum(containers_needed[mine]), excess) + 1]
            spare = room[1:] - load[1:]
            spare[z - 1] = -np.inf
            self.home[moving] = int(np.argmax(spare)) + 1

    def _stock(self) -> None:
        """Initial stock: each item at a random point of its replenishment cycle, spread over
        a few containers; a warehouse that cannot hold it at ``occupancy`` is an error."""
        inv, rng = self.cfg.inventory, self.rng
        per_day = 24 * 60 / self.cfg.sim.epoch_minutes
        # on hand as in the (reorder point, lot) cycle's steady state, at a random phase
        low = max(inv.reorder_days - inv.lead_epochs / per_day, 0.0)
        days = rng.uniform(low, low + inv.lot_days, self.rate.size)
        stock = np.floor(self.rate * per_day * days)
        per_full = np.maximum(np.floor(self.capacity.mean() / self.unit_liters), 1)
        self._reslot(np.ceil(stock / per_full))
        for zone in range(self.cfg.layout.zones):
            items = np.flatnonzero(self.home == zone)
            pool = rng.permutation(np.flatnonzero(self.zone == zone))
            spread = 1 + rng.poisson(inv.containers_per_item_mean - 1, items.size)
            room = int(inv.occupancy * pool.size)
            full = np.ceil(stock[items] / per_full[items])
            if full.sum() > room:
                raise FieldrlError(
                    f"the warehouse is too small for its stock policy: the initial stock needs "
                    f"{int(full.sum())} containers in zone {zone}, {room} are "
                    "allowed (lower items.demand_units_per_epoch or inventory.*_days, or add "
                    "layout.containers)"
                )
            extra = np.maximum(spread - full, 0)  # fragments, as far as room allows
            extra = np.floor(extra * min(1.0, max(room - full.sum(), 0) / max(extra.sum(), 1)))
            need = np.maximum(full + extra, 1).astype(np.int64)
            keep = np.cumsum(need) <= room
            items, need = items[keep], need[keep]
            slots = pool[: need.sum()]
            owner = np.repeat(items, need)
            share = rng.random(slots.size) + 0.05
            total = np.bincount(np.repeat(np.arange(items.size), need), share, items.size)
            units = np.floor(stock[owner] * share / np.repeat(total, need))
            fits = np.floor(self.capacity[slots] / self.unit_liters[owner])
            self.item_of[slots] = owner
            self.units[slots] = np.minimum(units, fits).astype(np.int64)
        self.item_of[self.units == 0] = -1
        # items below their reorder point have a lot on its way, due when on hand reaches
        # `low`: without it all of them reorder at once and the lots land together
        on_hand = self.stock() / np.maximum(self.rate * per_day, 1e-12)
        pending = np.flatnonzero(on_hand < inv.reorder_days)
        wait = (on_hand[pending] - low) * per_day
        late = wait < 0  # placed short (containers capped it): due at a random time
        wait[late] = rng.integers(0, inv.lead_epochs, late.sum())
        wait = np.minimum(wait, inv.lead_epochs - 1)
        lots = np.ceil(self.rate[pending] * per_day * inv.lot_days).astype(np.int64)
        self.pipeline[wait.astype(np.int64), pending] = lots

    # ----- observation ----------------------------------------------------------------
    def stock(self) -> np.ndarray:
        """Units on hand per item."""
        held = self.item_of >= 0
        return np.bincount(self.item_of[held], self.units[held], self.rate.size)

    def fill(self) -> np.ndarray:
        held = self.item_of >= 0
        out = np.zeros(self.capacity.size, np.float32)
        out[held] = self.units[held] * self.unit_liters[self.item_of[held]] / self.capacity[held]
        return out

    def candidates(self) -> Candidates:
        """Every open move: a partly full container into one of the next
        ``sim.targets_per_source`` fuller containers of the same item that have room."""
        cfg, lab = self.cfg, self.cfg.labor
        held = np.flatnonzero(self.item_of >= 0)
        item = self.item_of[held]
        volume = self.units[held] * self.unit_liters[item]
        fill = volume / self.capacity[held]
        # per item, emptiest first: one stable sort of item + fill / 2 (fill <= 1) gives
        # lexsort((fill, item))'s order at half its cost
        order = np.argsort(item + 0.5 * fill, kind="stable")
        s_item, s_held, s_volume, s_fill = item[order], held[order], volume[order], fill[order]
        starts = np.flatnonzero(np.r_[True, s_item[1:] != s_item[:-1]])
        sizes = np.diff(np.r_[starts, s_item.size])
        count = np.zeros(self.rate.size, np.int64)
        count[s_item[starts]] = sizes
        pairs = []
        for k in range(1, cfg.sim.targets_per_source + 1):
            i = np.flatnonzero(s_fill[: s_item.size - k] < cfg.sim.partial_fill)
            i = i[s_item[i] == s_item[i + k]]
            j = i + k
            room = self.capacity[s_held[j]] - s_volume[j]
            i, j = i[room >= s_volume[i]], j[room >= s_volume[i]]
            pairs.append((i, j))
        i = np.concatenate([p[0] for p in pairs])
        j = np.concatenate([p[1] for p in pairs])
        src, tgt, src_item, src_volume = s_held[i], s_held[j], s_item[i], s_volume[i]
        units = self.units[src]
        move_m = np.abs(self.distance[src] - self.distance[tgt])
        walk = 0.0 if lab.moves_at_station else self.distance[src] + self.distance[tgt] + move_m
        labor_s = (
            lab.move_fixed_seconds + lab.move_seconds_per_unit * units + walk / lab.walk_m_per_s
        )
        labor_h = labor_s / 3600.0
        rate = self.rate[src_item]
        stock = self.stock()
        zones = self.cfg.layout.zones
        empty_share = np.bincount(self.zone[self.item_of < 0], minlength=zones) / np.maximum(
            np.bincount(self.zone, minlength=zones), 1
        )
        zone_backlog = np.bincount(self.home, self.backlog * self.unit_liters, zones)
        zone_backlog = zone_backlog / np.maximum(np.bincount(self.zone, self.capacity, zones), 1)
        features = np.stack(
            [
                np.log1p(rate),
                self.unit_liters[src_item],
                src_volume / self.capacity[src],
                (self.units[tgt] * self.unit_liters[src_item]) / self.capacity[tgt],
                self.distance[src] / 100.0,
                self.distance[tgt] / 100.0,
                move_m / 100.0,
                np.log1p(units),
                labor_s / 60.0,
                np.log(count[src_item]),
                np.minimum(stock[src_item] / np.maximum(rate, 1e-6) / 48.0, 30.0),
                np.minimum(self.epoch - self.last_pick[src], 96) / 48.0,
                empty_share[self.zone[src]],
                100.0 * zone_backlog[self.zone[src]],
                self.capacity[src] / 40.0,
                rate * self.capacity[src] / labor_h / 1e5,
            ],
            axis=1,
        ).astype(np.float32)
        return Candidates(
            source=src.astype(np.int32),
            target=tgt.astype(np.int32),
            item=src_item.astype(np.int32),
            zone=self.zone[src],
            labor_hours=labor_h.astype(np.float32),
            features=features,
            context=self.context(),
        )

    def context(self) -> np.ndarray:
        held = self.item_of >= 0
        phase = 2 * np.pi * (self.epoch % self.cfg.sim.horizon_epochs) / self.cfg.sim.horizon_epochs
        inbound = self.pipeline.sum() + self.backlog.sum()
        return np.array(
            [
                self.fill()[held].sum() / self.capacity.size,
                1.0 - held.mean(),
                self.pipeline[self.epoch % self.pipeline.shape[0]].sum()
                / max(self.cfg.items.demand_units_per_epoch, 1),
                self.backlog.sum() / max(inbound, 1),
                self.labor_hours() / 100.0,
                np.sin(phase),
                np.cos(phase),
            ],
            dtype=np.float32,
        )

    # ----- dynamics -----------------------------------------------------------------
    def step(self, cands: Candidates, chosen: np.ndarray) -> EpochResult:
        """Apply the chosen candidate indices, then one epoch of inbound and demand."""
        lab = self.cfg.labor
        chosen = np.asarray(chosen, dtype=np.int64)
        src, tgt = cands.source[chosen], cands.target[chosen]
        if np.unique(np.r_[src, tgt]).size != 2 * chosen.size:
            raise FieldrlError("infeasible selection: a container appears in two moves")
        if not (self.item_of[src] == self.item_of[tgt]).all() or (self.item_of[src] < 0).any():
            raise FieldrlError("infeasible selection: a move between different items")
        freed_liters = float(self.capacity[src].sum())
        self.units[tgt] += self.units[src]
        self.units[src] = 0
        self.item_of[src] = -1
        epoch_hours = hours = self.labor_hours()
        if lab.consolidation_from_pickers:
            hours -= float(cands.labor_hours[chosen].sum())
        (put_units, put_value, put_into), hours = self._put_away(hours, epoch_hours)
        picked, lost, pick_value, pick_m = self._pick(hours)
        replenished = self._reorder()
        self._drift()
        self.epoch += 1
        penalty = self.cfg.objective.travel_penalty * pick_m / 1000.0
        return EpochResult(
            units_picked=float(picked),
            units_put_away=float(put_units),
            units_lost=float(lost),
            units_replenished=float(replenished),
            backlog_units=float(self.backlog.sum()),
            containers_freed=int(chosen.size),
            liters_freed=freed_liters,
            moves=int(chosen.size),
            labor_consolidation=float(cands.labor_hours[chosen].sum()),
            empty_containers=int((self.item_of < 0).sum()),
            labor_hours=epoch_hours,
            objective=put_value + pick_value - penalty,
            travel_m=pick_m,
            put_away_into=put_into,
        )

    def _put_away(
        self, hours: float, epoch_hours: float
    ) -> tuple[tuple[int, float, np.ndarray], float]:
        """Backlog into empty home-zone containers: (units, their value, (container,
        units) rows), and the hours left."""
        lab = self.cfg.labor
        arriving = self.pipeline[self.epoch % self.pipeline.shape[0]]
        self.backlog += arriving
        arriving[:] = 0
        per_container = np.floor(self.capacity.mean() / self.unit_liters).astype(np.int64)
        share = min(hours, lab.putaway_share * epoch_hours)
        max_containers = int(max(share, 0.0) * 3600 / lab.putaway_seconds_per_container)
        put_total = used = 0
        value = 0.0
        filled = []
        for zone in range(self.cfg.layout.zones):  # put away only into the item's home zone
            waiting = np.flatnonzero((self.backlog > 0) & (self.home == zone))
            empties = np.flatnonzero((self.item_of < 0) & (self.zone == zone))
            if waiting.size == 0 or empties.size == 0 or used >= max_containers:
                continue
            waiting = self.rng.permutation(waiting)
            need = -(-self.backlog[waiting] // per_container[waiting])
            budget = min(empties.size, max_containers - used)
            take = np.cumsum(need) <= budget
            waiting, need = waiting[take], need[take]
            if waiting.size == 0:
                continue
            slots = self.rng.permutation(empties)[: need.sum()]
            owner = np.repeat(waiting, need)
            fits = np.floor(self.capacity[slots] / self.unit_liters[owner]).astype(np.int64)
            before = np.r_[0, np.cumsum(fits)[:-1]]
            first = np.r_[0, np.cumsum(need)[:-1]]
            offset = before - np.repeat(before[first], need)
            units = np.clip(np.repeat(self.backlog[waiting], need) - offset, 0, fits)
            self.item_of[slots] = owner
            self.units[slots] = units
            self.item_of[slots[units == 0]] = -1
            placed = np.bincount(owner, units, self.rate.size).astype(np.int64)
            self.backlog -= placed
            put_total += int(placed.sum())
            used += int(slots.size)
            value += self.cfg.objective.putaway_weight * float(placed @ self.unit_value)
            filled.append(np.stack([slots[units > 0], units[units > 0]], 1))
        into = np.concatenate(filled).astype(np.int64) if filled else np.zeros((0, 2), np.int64)
        left = hours - used * lab.putaway_seconds_per_container / 3600.0
        return (put_total, value, into), left

    def _pick(self, hours: float) -> tuple[int, int, float, float]:
        """Picks drain each ordered item's containers (least full first, or in the order a
        picker meets them: ``sim.pick_rule``). Every container
        visited costs a walk (fragmented items cost more), so picking is labor-limited:
        if the day's orders need more labor than is left, every item is cut pro rata."""
        lab = self.cfg.labor
        demand = self.rng.poisson(self._demand_rate())
        want = np.minimum(demand, self.stock()).astype(np.int64)
        held = np.flatnonzero(self.item_of >= 0)
        key = (
            self.units[held]
            if self.cfg.sim.pick_rule == "least_full"
            else self.rng.random(held.size)
        )
        order = held[np.lexsort((key, self.item_of[held]))]
        item = self.item_of[order]
        units = self.units[order]
        exclusive = np.cumsum(units) - units
        first = np.r_[True, item[1:] != item[:-1]]
        before = exclusive - exclusive[np.flatnonzero(first)][np.cumsum(first) - 1]

        def plan(w: np.ndarray) -> np.ndarray:
            return np.clip(w[item] - before, 0, units).astype(np.int64)

        take = plan(want)
        seconds = (
            take.sum() * lab.pick_seconds_per_unit + (take > 0).sum() * lab.pick_seconds_per_visit
        )
        available = max(hours, 0.0) * 3600
        if seconds > available:
            take = plan(np.floor(want * available / seconds).astype(np.int64))
        self.units[order] -= take
        visited = order[take > 0]
        self.last_pick[visited] = self.epoch
        self.item_of[order[self.units[order] == 0]] = -1
        picked = int(take.sum())
        value = float(take @ self.unit_value[item])
        walked = 2.0 * float(self.distance[visited].sum())
        return picked, int(demand.sum() - picked), value, walked

    def _reorder(self) -> int:
        inv = self.cfg.inventory
        per_day = 24 * 60 / self.cfg.sim.epoch_minutes
        position = self.stock() + self.backlog + self.pipeline.sum(axis=0)
        low = position < self.rate * per_day * inv.reorder_days
        lot = np.ceil(self.rate * per_day * inv.lot_days * self.rng.uniform(0.7, 1.3, low.size))
        lot = lot.astype(np.int64)
        due = (self.epoch + inv.lead_epochs) % self.pipeline.shape[0]
        self.pipeline[due, low] += lot[low]
        return int(lot[low].sum())

    def _drift(self) -> None:
        sigma = self.cfg.items.drift_sigma
        if sigma > 0:
            total = self.rate.sum()
            self.rate = self.rate * np.exp(self.rng.normal(-(sigma**2) / 2, sigma, self.rate.size))
            self.rate *= total / self.rate.sum()
