ALTER TABLE `api_keys` ADD `max_concurrent` integer;--> statement-breakpoint
ALTER TABLE `api_keys` ADD `per_user_rpm` integer;--> statement-breakpoint
ALTER TABLE `api_keys` ADD `per_user_daily_nanos` integer;--> statement-breakpoint
ALTER TABLE `usage_records` ADD `end_user` text;--> statement-breakpoint
CREATE INDEX `usage_key_end_user_idx` ON `usage_records` (`key_id`,`end_user`,`created_at`);