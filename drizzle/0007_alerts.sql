CREATE TABLE `alert_deliveries` (
	`id` text PRIMARY KEY NOT NULL,
	`event` text NOT NULL,
	`key_id` text,
	`subject` text,
	`target` text,
	`status` text NOT NULL,
	`attempts` integer NOT NULL,
	`last_code` integer,
	`last_error` text,
	`payload` text NOT NULL,
	`created_at` integer NOT NULL,
	`next_attempt_at` integer,
	`delivered_at` integer,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `alert_deliveries_created_idx` ON `alert_deliveries` (`created_at`);--> statement-breakpoint
CREATE INDEX `alert_deliveries_key_idx` ON `alert_deliveries` (`key_id`,`created_at`);--> statement-breakpoint
ALTER TABLE `api_keys` ADD `alerts` text;